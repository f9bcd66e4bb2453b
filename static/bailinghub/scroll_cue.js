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
    function update() {
      var hidden = box.scrollWidth - box.clientWidth;
      if (hidden <= 1) {
        cue.hidden = true;
        return;
      }
      var atStart = box.scrollLeft <= 1;
      var atEnd = box.scrollLeft >= hidden - 1;
      cue.textContent = atStart ? "The table is wider than the screen: scroll it sideways for more columns →"
        : atEnd ? "← More columns to the left"
        : "← More columns on both sides →";
      cue.hidden = false;
    }
    box.addEventListener("scroll", update, { passive: true });
    window.addEventListener("resize", update);
    update();
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll(BOXES), cueFor);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
