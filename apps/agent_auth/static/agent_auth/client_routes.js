/* A new agent client's "Allowed routes": only the routes of the project chosen above are shown
   (apps/agent_auth/admin.py, RouteCheckboxes). Each tick names the projects that have a route with
   its key; ticks of other projects are hidden and cleared, since the save refuses them anyway. */
(function () {
  "use strict";

  // A form opened for one project (?project=) lists that project's routes only: another project
  // chosen on it has routes the page does not hold, so the note offers to open it for that one.
  var openedFor = new URLSearchParams(window.location.search).get("project");

  function explain(note, chosen) {
    note.textContent = "";
    if (openedFor && chosen !== openedFor) {
      note.append("This form lists the routes of the project it was opened for. ");
      var link = document.createElement("a");
      link.href = "?project=" + encodeURIComponent(chosen);
      link.id = "allowed-routes-reopen";
      link.textContent = "Open it for the project chosen above";
      note.append(link, " (what you typed here is not kept).");
    } else {
      note.append("This project has no routes yet: add one under Routes, then allow it here.");
    }
  }

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
    if (!note.hidden) explain(note, chosen);
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
    list.parentNode.insertBefore(note, list.nextSibling);
    sync(select, boxes, note);
    select.addEventListener("change", function () { sync(select, boxes, note); });
  });
})();
