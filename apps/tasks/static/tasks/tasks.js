/* Task pages: the create form reveals member rows and loads each row's workspace's tools when it is picked;
   the task page refreshes its counters and state from the task's live URL every few seconds. */
(function () {
  "use strict";
  var STATE_CLASSES = {active: "bh-ok", paused: "bh-warn", blocked: "bh-bad", cancelled: "bh-off"};

  // A row's tools box holds its workspace's tools only; picking another workspace loads that
  // route's (the page's tools URL renders the box as the server does after a refused submit).
  function loadTools(row, url) {
    var select = row.querySelector("select[name$='-workspace']");
    var box = row.querySelector("[data-tools-for]");
    if (!select || !box) { return; }
    var wanted = select.value;
    if (box.getAttribute("data-workspace") === wanted) { return; }
    box.setAttribute("data-workspace", wanted);
    box.setAttribute("aria-busy", "true");
    var query = new URLSearchParams({workspace: wanted, row: box.getAttribute("data-tools-for")});
    fetch(url + "?" + query.toString(), {credentials: "same-origin", headers: {"Accept": "text/html"}})
      // A signed-out operator is redirected to the login page: not a tools box.
      .then(function (response) {
        return response.ok && !response.redirected ? response.text() : Promise.reject(response.status);
      })
      .then(function (html) { if (select.value === wanted) { box.innerHTML = html; } })
      .catch(function () {
        if (select.value !== wanted) { return; }
        box.removeAttribute("data-workspace");
        box.textContent = "The workspace's tools could not be loaded: choose it again.";
      })
      .then(function () { if (select.value === wanted) { box.removeAttribute("aria-busy"); } });
  }

  // The routes the picked session may use: its option names them in data-routes (the plain select's
  // options, and the one a refused form kept in a searched select); a session found by searching
  // brings them in its search result (select2 keeps it as the option's data). None picked: null.
  function sessionRoutes(session) {
    var picked = session.options[session.selectedIndex];
    if (!picked || !picked.value) { return null; }
    if (picked.hasAttribute("data-routes")) { return picked.getAttribute("data-routes").split(" "); }
    var jQuery = window.django && window.django.jQuery;
    if (!jQuery || !jQuery(session).hasClass("select2-hidden-accessible")) { return null; }
    var found = jQuery(session).select2("data")[0];
    return found && Array.isArray(found.routes) ? found.routes : null;
  }

  // A row's workspace select offers only the routes its picked session may use, whether the session
  // was picked from the list or found by searching. Picking another session clears a workspace it may
  // not use.
  function limitWorkspaces(row, url, clear) {
    var session = row.querySelector("select[name$='-session']");
    var select = row.querySelector("select[name$='-workspace']");
    if (!session || !select || select.classList.contains("admin-autocomplete")) { return; }
    var routes = sessionRoutes(session);
    Array.prototype.forEach.call(select.options, function (option) {
      // Not the one a refused form kept picked: a disabled option is not submitted.
      option.disabled = Boolean(option.value) && routes !== null && routes.indexOf(option.value) < 0 &&
        (clear || !option.selected);
    });
    var current = select.options[select.selectedIndex];
    if (clear && current && current.disabled) {
      select.value = "";
      if (url) { loadTools(row, url); }
    }
  }

  // The picked session's whole label under its select: a closed select shows its start only, and
  // at 390 px that hid the device and the task the session was in ("— in X (cancelled)").
  function showPicked(row) {
    var line = row.querySelector("[data-session-picked]");
    var session = row.querySelector("select[name$='-session']");
    if (!line || !session) { return; }
    var picked = session.options[session.selectedIndex];  // select2 keeps the option it found here too
    var text = picked && picked.value ? picked.textContent.trim() : "";
    line.textContent = text ? "Picked: " + text : "";
  }

  // A long tools box filters its boxes by name; a checked one stays in sight.
  function filterBox(input) {
    var words = input.value.trim().toLowerCase();
    input.parentNode.querySelectorAll(".bh-tool").forEach(function (label) {
      var box = label.querySelector("input");
      var name = label.querySelector("code").textContent.toLowerCase();
      label.hidden = Boolean(words) && name.indexOf(words) < 0 && !(box && box.checked);
    });
  }

  function setupCreate() {
    document.addEventListener("input", function (event) {
      if (event.target.classList && event.target.classList.contains("bh-tools-filter")) { filterBox(event.target); }
    });
    // Enter in the filter would submit the task form.
    document.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && event.target.classList && event.target.classList.contains("bh-tools-filter")) {
        event.preventDefault();
      }
    });
    var members = document.querySelector("[data-tools-url]");
    var url = members && members.getAttribute("data-tools-url");
    var rows = document.querySelectorAll("[data-member-row]");
    rows.forEach(function (row) {
      var session = row.querySelector("select[name$='-session']");
      var jQuery = window.django && window.django.jQuery;
      if (session) {
        // A refused form keeps the workspace it was refused for, beside its error.
        limitWorkspaces(row, url, false);
        showPicked(row);
        var picked = function () { limitWorkspaces(row, url, true); showPicked(row); };
        // A session found by searching (select2) is announced through jQuery only, as a workspace is.
        if (session.classList.contains("admin-autocomplete") && jQuery) {
          jQuery(session).on("change", picked);
        } else {
          session.addEventListener("change", picked);
        }
      }
      var select = row.querySelector("select[name$='-workspace']");
      if (!select || !url) { return; }
      // A browser restoring the form (back, reload) may put back another workspace than rendered.
      loadTools(row, url);
      // A workspace picked by searching (Django's autocomplete, select2) is announced through jQuery
      // only; jQuery's handler hears a plain select's own change too.
      if (jQuery) { jQuery(select).on("change", function () { loadTools(row, url); }); }
      else { select.addEventListener("change", function () { loadTools(row, url); }); }
    });
    var add = document.getElementById("add-member");
    if (!add) { return; }
    function refresh() { add.hidden = !document.querySelector("[data-member-row][hidden]"); }
    add.addEventListener("click", function () {
      var next = document.querySelector("[data-member-row][hidden]");
      if (!next) { return; }
      next.hidden = false;
      refresh();
      // The focus goes to the row it added: the last row hides the button, which left it on the page's body.
      var first = next.querySelector(".select2-selection, select:not(.select2-hidden-accessible), input:not([type=hidden])");
      if (first) { first.focus(); }
    });
    refresh();
  }

  function setupLive() {
    var main = document.querySelector("[data-live-url]");
    if (!main) { return; }
    var url = main.getAttribute("data-live-url");
    var shown = main.getAttribute("data-revision");
    function text(id, value) { var el = document.getElementById(id); if (el) { el.textContent = value; } }
    function shownText(id) { var el = document.getElementById(id); return el ? el.textContent : ""; }
    // A screen reader hears the counters when they change, not every refresh (the status region
    // is written only then).
    var status = document.getElementById("task-live-status");
    var badge0 = document.querySelector("#task-state [data-task-state]");
    var heard = summary(badge0 ? badge0.getAttribute("data-task-state") : "", shownText("task-budget"),
                        shownText("task-permits"));
    function summary(state, budget, permits) {
      return "Task " + state + "; writes consumed / reserved / max " + budget + "; permits active / max " + permits + ".";
    }
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
          var now = summary(data.state, data.budget, data.permits);
          if (status && now !== heard) {
            heard = now;
            status.textContent = "Updated: " + now + (stale && !stale.hidden ? " Changed since this page loaded: reload before deciding." : "");
          }
        })
        .catch(function () { /* the next tick tries again */ });
    }
    window.setInterval(tick, 3000);
  }

  document.addEventListener("DOMContentLoaded", function () { setupCreate(); setupLive(); });
})();
