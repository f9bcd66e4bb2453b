/* Task pages: the create form reveals member rows and shows each row only its workspace's tools;
   the task page refreshes its counters and state from the task's live URL every few seconds. */
(function () {
  "use strict";
  var STATE_CLASSES = {active: "bh-ok", paused: "bh-warn", blocked: "bh-bad", cancelled: "bh-off"};

  function filterTools(row) {
    var select = row.querySelector("select[name$='-workspace']");
    var workspace = select ? select.value : "";
    row.querySelectorAll(".bh-tool").forEach(function (label) {
      var match = !workspace || label.getAttribute("data-route") === workspace;
      var box = label.querySelector("input");
      if (match) { label.removeAttribute("data-hidden"); } else { label.setAttribute("data-hidden", ""); }
      if (!match && box) { box.checked = false; }
    });
  }

  function setupCreate() {
    var rows = document.querySelectorAll("[data-member-row]");
    rows.forEach(function (row) {
      filterTools(row);
      var select = row.querySelector("select[name$='-workspace']");
      if (!select) { return; }
      // A workspace picked by searching (Django's autocomplete, select2) is announced through jQuery
      // only; jQuery's handler hears a plain select's own change too.
      var jQuery = window.django && window.django.jQuery;
      if (jQuery) { jQuery(select).on("change", function () { filterTools(row); }); }
      else { select.addEventListener("change", function () { filterTools(row); }); }
    });
    var add = document.getElementById("add-member");
    if (!add) { return; }
    function refresh() { add.hidden = !document.querySelector("[data-member-row][hidden]"); }
    add.addEventListener("click", function () {
      var next = document.querySelector("[data-member-row][hidden]");
      if (next) { next.hidden = false; }
      refresh();
    });
    refresh();
  }

  function setupLive() {
    var main = document.querySelector("[data-live-url]");
    if (!main) { return; }
    var url = main.getAttribute("data-live-url");
    var shown = main.getAttribute("data-revision");
    function text(id, value) { var el = document.getElementById(id); if (el) { el.textContent = value; } }
    function tick() {
      fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (data) {
          if (!data) { return; }
          text("task-budget", data.budget);
          text("task-budget-note", data.budget_note || "");
          text("task-permits", data.permits);
          text("task-permits-note", data.permits_note || "");
          text("task-revision", data.revision);
          text("task-ledger-sequence", data.ledger_sequence);
          var badge = document.querySelector("#task-state [data-task-state]");
          if (badge) {
            badge.textContent = data.state;
            badge.setAttribute("data-task-state", data.state);
            badge.className = "bh-badge " + (STATE_CLASSES[data.state] || "");
          }
          var stale = document.getElementById("task-stale");
          if (stale) { stale.hidden = String(data.revision) === shown; }
        })
        .catch(function () { /* the next tick tries again */ });
    }
    window.setInterval(tick, 3000);
  }

  document.addEventListener("DOMContentLoaded", function () { setupCreate(); setupLive(); });
})();
