/* A table wider than its box scrolls inside it (console.css): on a phone, columns past the edge
   (a list's Messages, Last message, Created) were off-screen with nothing saying the table scrolls.
   Each such box gets a line above it while, and only while, it has columns out of sight. */
(function () {
  "use strict";

  var BOXES = "#changelist .results, .bh-scroll, .inline-group .tabular";

  function cueFor(box) {
    var cue = document.createElement("p");
    cue.className = "bh-scroll-cue";
    cue.hidden = true;
    box.parentNode.insertBefore(cue, box);
    // A box of text only (no link, no field) is scrolled from the keyboard once it takes focus; in a
    // box with links or fields, tabbing to one scrolls it into sight, and a stop more is in the way.
    // Asked at each update: a live page adds rows.
    var ownTabindex = box.hasAttribute("tabindex");
    var FOCUSABLE = "a[href], button, input, select, textarea, summary, [tabindex]:not([tabindex='-1'])";
    function focusable(on) {
      if (ownTabindex) return;
      if (on && box.querySelector(FOCUSABLE) !== null) on = false;
      if (on) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "region");
        box.setAttribute("aria-label", "Table, scrolls sideways");
      } else {
        box.removeAttribute("tabindex");
        box.removeAttribute("role");
        box.removeAttribute("aria-label");
      }
    }
    function update() {
      var hidden = box.scrollWidth - box.clientWidth;
      if (hidden <= 1) {
        cue.hidden = true;
        focusable(false);
        return;
      }
      focusable(true);
      var atStart = box.scrollLeft <= 1;
      var atEnd = box.scrollLeft >= hidden - 1;
      cue.textContent = atStart ? "The table is wider than the screen: scroll it sideways for more columns →"
        : atEnd ? "← More columns to the left"
        : "← More columns on both sides →";
      cue.hidden = false;
    }
    box.addEventListener("scroll", update, { passive: true });
    if (window.ResizeObserver) {
      // The box or its table changes width without a window resize: the sidebar folds, a section
      // opens, a live page adds a row.
      var observer = new ResizeObserver(update);
      observer.observe(box);
      if (box.firstElementChild) observer.observe(box.firstElementChild);
    } else {
      window.addEventListener("resize", update);
    }
    update();
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll(BOXES), cueFor);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
