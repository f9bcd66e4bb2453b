/* A new agent client's "Allowed routes": only the routes of the project chosen above are shown
   (apps/agent_auth/admin.py, RouteCheckboxes). Each tick names the projects that have a route with
   its key; ticks of other projects are hidden and cleared, since the save refuses them anyway. */
(function () {
  "use strict";

  function sync(select, boxes, note) {
    var chosen = select.value;
    var shown = 0;
    boxes.forEach(function (box) {
      var fits = !chosen || box.getAttribute("data-projects").split(" ").indexOf(chosen) !== -1;
      var row = box.closest("#id_allowed_routes > div") || box.parentElement;
      row.hidden = !fits;
      if (!fits) box.checked = false;
      if (fits) shown += 1;
    });
    note.hidden = !chosen || shown > 0;
  }

  document.addEventListener("DOMContentLoaded", function () {
    var select = document.getElementById("id_project");
    var list = document.getElementById("id_allowed_routes");
    if (!select || !list) return;
    var boxes = Array.prototype.slice.call(list.querySelectorAll("input[type=checkbox][data-projects]"));
    if (!boxes.length) return;
    var note = document.createElement("p");
    note.id = "allowed-routes-none";
    note.className = "help";
    note.textContent = "This project has no routes yet: add one under Routes, then allow it here.";
    list.parentNode.insertBefore(note, list.nextSibling);
    sync(select, boxes, note);
    select.addEventListener("change", function () { sync(select, boxes, note); });
  });
})();
