/* A route's tool picks (div.bh-tool-picks, apps/runtime/route_tools_form.py) past a dozen boxes get a
   bar above them: a filter over the tools' names, methods and paths, "Tick shown" and "Untick shown"
   for the boxes the filter leaves, and how many are ticked. A provider of 3,000 tools was a scroll
   box of 3,000 checkboxes with no way to narrow it. Without script the boxes work as before. */
(function () {
  "use strict";

  var BAR_FROM = 13; // more than a dozen

  function number(n) {
    return n.toLocaleString("en");
  }

  function button(text, title, label) {
    var b = document.createElement("button");
    b.type = "button"; // inside the admin's form: never a submit
    b.className = "button bh-picks-button";
    b.textContent = text;
    b.title = title;
    b.setAttribute("aria-label", label); // several fields have these buttons: say which one
    return b;
  }

  function fieldName(box) {
    var row = box.closest(".form-row");
    if (!row) return "these tools";
    var labels = row.querySelectorAll("label");
    for (var i = 0; i < labels.length; i++) {
      if (!box.contains(labels[i])) return labels[i].textContent.replace(/:\s*$/, "").trim();
    }
    return "these tools";
  }

  function setup(box) {
    var rows = Array.prototype.map.call(box.querySelectorAll("label"), function (label) {
      return { wrap: label.parentNode, input: label.querySelector("input[type=checkbox]"),
               text: label.textContent.toLowerCase() };
    }).filter(function (row) { return row.input; });
    if (rows.length < BAR_FROM) return;
    var name = fieldName(box);

    var bar = document.createElement("div");
    bar.className = "bh-picks-bar";
    var filter = document.createElement("input");
    filter.type = "search";
    filter.className = "bh-picks-filter";
    filter.placeholder = "Filter " + number(rows.length) + " tools";
    filter.title = "Words of a name, a method or a path; a tool shows when it has them all";
    filter.setAttribute("aria-label", "Filter " + name);
    if (box.id) filter.setAttribute("aria-controls", box.id);
    var tick = button("Tick shown", "Tick every tool the filter shows", "Tick shown: " + name);
    var untick = button("Untick shown", "Untick every tool the filter shows", "Untick shown: " + name);
    var count = document.createElement("span");
    count.className = "bh-picks-count bh-muted";
    count.setAttribute("aria-live", "polite");
    bar.appendChild(filter);
    bar.appendChild(tick);
    bar.appendChild(untick);
    bar.appendChild(count);
    // Bar and box share the slot the box had in its row (a flex row beside the field's label).
    var wrap = document.createElement("div");
    wrap.className = "bh-picks";
    box.parentNode.insertBefore(wrap, box);
    wrap.appendChild(bar);
    wrap.appendChild(box);

    function shown() {
      return rows.filter(function (row) { return !row.wrap.hidden; });
    }

    function recount() {
      var ticked = rows.filter(function (row) { return row.input.checked; }).length;
      var visible = shown().length;
      count.textContent = number(ticked) + " of " + number(rows.length) + " ticked" +
        (visible === rows.length ? "" : " · " + number(visible) + " shown");
    }

    function apply() {
      var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
      rows.forEach(function (row) {
        row.wrap.hidden = !words.every(function (word) { return row.text.indexOf(word) !== -1; });
      });
      recount();
    }

    var bulk = false;

    function setShown(checked) {
      // One count at the end: each box's change event counted all rows again (3,000 boxes: 18M checks).
      bulk = true;
      try {
        shown().forEach(function (row) {
          if (row.input.checked !== checked) {
            row.input.checked = checked;
            row.input.dispatchEvent(new Event("change", { bubbles: true }));
          }
        });
      } finally {
        bulk = false;
      }
      recount();
    }

    filter.addEventListener("input", apply);
    // Enter in the filter would submit the route's form.
    filter.addEventListener("keydown", function (event) {
      if (event.key === "Enter") event.preventDefault();
    });
    tick.addEventListener("click", function () { setShown(true); });
    untick.addEventListener("click", function () { setShown(false); });
    box.addEventListener("change", function () { if (!bulk) recount(); });
    recount();
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll("div.bh-tool-picks"), setup);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
