/* The operator console's live parts. A knowledge base page ([data-bh-ingest]) polls its status
   endpoint every two seconds and updates each document's status, stage progress, place in the
   queue and failure reason, and the latest index generation's progress, until nothing moves
   without a person; then the generations table is read again. Retry and Confirm post through the
   admin's own views with the CSRF token. */
(function () {
  "use strict";

  var POLL_MS = 2000;

  function csrfToken(root) {
    var input = root.querySelector("input[name=csrfmiddlewaretoken]") ||
      document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function field(container, name) {
    return container.querySelector('[data-field="' + name + '"]');
  }

  function actionForm(root, url, label) {
    var form = document.createElement("form");
    form.method = "post";
    form.action = url;
    form.className = "kb-inline-form";
    form.setAttribute("data-bh-action", "");
    var token = document.createElement("input");
    token.type = "hidden";
    token.name = "csrfmiddlewaretoken";
    token.value = csrfToken(root);
    var next = document.createElement("input");
    next.type = "hidden";
    next.name = "next";
    next.value = window.location.pathname;
    var submit = document.createElement("input");
    submit.type = "submit";
    submit.className = "button";
    submit.value = label;
    form.append(token, next, submit);
    return form;
  }

  // A document turned off (searches and agents do not read it) has an "off" badge after its status.
  function renderOff(badge, off, isOff) {
    if (isOff && !off) {
      off = document.createElement("span");
      off.className = "bh-badge bh-off";
      off.setAttribute("data-field", "off");
      off.title = "Searches and agents do not read it.";
      off.textContent = "off";
      badge.after(" ", off);
    } else if (!isOff && off) {
      off.remove();
    }
  }

  // A failure in the file's own bytes: its page says what helps (a retry fails the same way).
  function adviceLink(url) {
    var link = document.createElement("a");
    link.href = url;
    link.className = "bh-nowrap";
    link.title = "A retry reads the same file and fails the same way.";
    link.textContent = "What to do";
    return link;
  }

  function renderDocument(root, row, doc) {
    var changed = row.getAttribute("data-status") !== doc.status;
    row.setAttribute("data-status", doc.status);
    var badge = field(row, "status");
    badge.className = "bh-doc-badge bh-doc-" + doc.status;
    badge.textContent = doc.status_label;
    renderOff(badge, field(row, "off"), doc.enabled === false);
    field(row, "progress").value = doc.percent;
    field(row, "percent").textContent = doc.percent + "%";
    field(row, "stage").textContent = doc.stage;
    showError(field(row, "error"), doc);
    if (changed) {
      var actions = field(row, "actions");
      actions.textContent = "";
      if (doc.retry_url) actions.append(actionForm(root, doc.retry_url, "Retry"));
      if (doc.advice_url) actions.append(adviceLink(doc.advice_url));
      if (doc.confirm_url) actions.append(actionForm(root, doc.confirm_url, "Confirm"));
    }
  }

  function renderGeneration(root, generation) {
    var box = root.querySelector("[data-bh-generation]");
    if (!box || !generation) return;
    field(box, "number").textContent = generation.number;
    var badge = field(box, "status");
    badge.className = "bh-doc-badge bh-gen-" + generation.status;
    badge.textContent = generation.status_label;
    field(box, "progress").value = generation.percent;
    field(box, "text").textContent = generation.text;
    showError(field(box, "error"), generation);
  }

  // The operator reads the message; the stable code stays in the title (what the API and logs say).
  function showError(element, item) {
    element.textContent = item.error_code ? item.error_message || item.error_code : "";
    if (item.error_code) element.title = item.error_code;
    else element.removeAttribute("title");
  }

  // The whole KB's documents by status, as the server counts them: the table may show only the newest.
  function renderSummary(root, data) {
    var summary = root.querySelector("[data-bh-summary]");
    if (summary && typeof data.summary === "string") setText(summary, data.summary);
  }

  function setLive(root, text) {
    var live = root.querySelector("[data-bh-live]");
    if (live) setText(live, text);
  }

  // The summary and the live note are a status region that a screen reader reads out when it changes:
  // written again with the same words at every poll, it read "Updating live…" every two seconds.
  function setText(element, text) {
    if (element.textContent !== text) element.textContent = text;
  }

  // The "Index generations" table under the settings is drawn with the page: once the work this
  // page watched is done, read it again, so that it does not contradict the live lines above.
  function refreshGenerations() {
    var group = document.getElementById("generations-group");
    if (!group || !window.DOMParser) return;
    fetch(window.location.pathname, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (!response.ok) throw new Error("status " + response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("generations-group");
        if (fresh) group.replaceWith(fresh);
      })
      .catch(function () { /* the table keeps what the page was drawn with */ });
  }

  function start(root) {
    var url = root.getAttribute("data-status-url");
    var timer = null;

    function apply(data) {
      data.documents.forEach(function (doc) {
        var row = root.querySelector('tr[data-document-id="' + doc.id + '"]');
        if (row) renderDocument(root, row, doc);
      });
      renderGeneration(root, data.generation);
      renderSummary(root, data);
      var chunks = root.querySelector("[data-bh-chunks]");
      if (chunks && data.active_chunks !== null) chunks.textContent = data.active_chunks;
    }

    function tick() {
      timer = null;
      fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" })
        .then(function (response) {
          if (!response.ok) throw new Error("status " + response.status);
          return response.json();
        })
        .then(function (data) {
          apply(data);
          var wasSettled = root.getAttribute("data-settled") === "true";
          root.setAttribute("data-settled", data.settled ? "true" : "false");
          if (data.settled && !wasSettled) refreshGenerations();
          if (data.settled) {
            setLive(root, "Up to date: every document is completed, failed or waiting for confirmation.");
          } else {
            setLive(root, "Updating live…");
            timer = setTimeout(tick, POLL_MS);
          }
        })
        .catch(function () {
          setLive(root, "Could not refresh the status; trying again…");
          timer = setTimeout(tick, POLL_MS * 2);
        });
    }

    root.bhRefresh = function () {
      if (timer) clearTimeout(timer);
      tick();
    };
    if (root.getAttribute("data-settled") !== "true") timer = setTimeout(tick, POLL_MS);
  }

  document.addEventListener("submit", function (event) {
    var form = event.target.closest ? event.target.closest("form[data-bh-action]") : null;
    var root = form ? form.closest("[data-bh-ingest]") : null;
    if (!form || !root || !window.fetch) return;
    event.preventDefault();
    var row = form.closest("tr");
    form.querySelectorAll("input[type=submit]").forEach(function (button) { button.disabled = true; });
    fetch(form.action, {
      method: "POST", body: new FormData(form), credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRFToken": csrfToken(root) },
    })
      .then(function (response) {
        return response.json().then(function (body) { return { ok: response.ok, body: body }; });
      })
      .then(function (result) {
        if (!result.ok) {
          if (row) field(row, "error").textContent = result.body.message || "The action was refused.";
          form.querySelectorAll("input[type=submit]").forEach(function (button) { button.disabled = false; });
          return;
        }
        if (row) {
          field(row, "actions").textContent = "";
          // Whatever the next status is (even "failed" again), draw its row and buttons anew.
          row.setAttribute("data-status", "");
        }
        root.bhRefresh();
      })
      .catch(function () {
        form.querySelectorAll("input[type=submit]").forEach(function (button) { button.disabled = false; });
      });
  });

  function init() {
    document.querySelectorAll("[data-bh-ingest]").forEach(start);
    // A page that answers a form (the search playground's hits) starts the keyboard and a screen reader
    // at the answer: from the page's top it was some forty Tab presses away, past the menu and the form.
    var answer = document.querySelector("[data-bh-focus]");
    if (answer) answer.focus();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
