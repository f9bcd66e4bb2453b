/* An approval's page shows the first few KB of the frozen arguments; "Show all" loads the whole
   snapshot from the approval's arguments URL only when the operator asks for it. */
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-bh-expand]");
    if (!button) { return; }
    event.preventDefault();
    var target = document.getElementById(button.getAttribute("data-bh-target"));
    var status = document.getElementById(button.getAttribute("data-bh-status"));
    button.disabled = true;
    status.textContent = "Loading…";
    fetch(button.getAttribute("data-bh-url"), {credentials: "same-origin", headers: {"Accept": "text/plain"}})
      .then(function (response) {
        return response.text().then(function (text) { return {ok: response.ok, text: text}; });
      })
      .then(function (answer) {
        if (!answer.ok) {
          status.textContent = answer.text || "The arguments could not be loaded.";
          button.disabled = false;
          return;
        }
        target.textContent = answer.text;
        target.setAttribute("data-expanded", "true");
        status.textContent = "Showing all of it.";
        // The button goes; the keyboard's focus goes on to what it showed, not back to the page's start.
        button.hidden = true;
        target.focus();
      })
      .catch(function () {
        status.textContent = "The arguments could not be loaded; try again.";
        button.disabled = false;
      });
  });
})();
