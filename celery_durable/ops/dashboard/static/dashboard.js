// celery_durable dashboard: live refresh of the element marked data-refresh, a run's
// streams followed by Server-Sent Events, a confirm before every action, and JSON
// payloads checked before they are sent. No framework.
(function () {
  "use strict";

  function openDetails(root) {
    return Array.from(root.querySelectorAll("details[open][id]")).map(function (d) { return d.id; });
  }

  function startRefresh(live) {
    var url = live.getAttribute("data-refresh");
    if (!url) { return; }
    var interval = parseInt(live.getAttribute("data-interval"), 10) || 3000;
    var toggle = document.getElementById("live-toggle");
    var busy = false;
    function tick() {
      if (busy || document.hidden || (toggle && !toggle.checked)) { return; }
      busy = true;
      fetch(url, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } })
        .then(function (response) { return response.ok ? response.text() : null; })
        .then(function (html) {
          if (html === null) { return; }
          var was = live.getAttribute("data-status");
          var opened = openDetails(live);
          var holder = document.createElement("div");
          holder.innerHTML = html;
          var head = holder.querySelector("[data-status].run-head");
          var now = head ? head.getAttribute("data-status") : null;
          if (was && now && now !== was && !document.querySelector("form.action :focus")) {
            window.location.reload();  // the actions that apply have changed
            return;
          }
          var shown = live.querySelector(".run-head");
          var parts = head ? head.getAttribute("data-parts") : null;
          var changed = shown && parts !== null && parts !== shown.getAttribute("data-parts");
          if (changed && !document.querySelector("form.action :focus")) {
            window.location.reload();  // a stream began: the page follows it too
            return;
          }
          live.innerHTML = html;
          opened.forEach(function (id) {
            var d = document.getElementById(id);
            if (d) { d.open = true; }
          });
        })
        .catch(function () { /* the next tick tries again */ })
        .finally(function () { busy = false; });
    }
    window.setInterval(tick, interval);
  }

  // A stream of the run page: each value its Server-Sent Event (id: its offset), the
  // last SHOWN kept; EventSource reconnects with Last-Event-ID on its own.
  var SHOWN = 500;

  function followStream(list) {
    var state = list.parentNode.querySelector("[data-stream-state]");
    var source = new EventSource(list.getAttribute("data-stream"));
    var count = 0;
    source.onmessage = function (event) {
      var value = JSON.parse(event.data);
      var item = document.createElement("li");
      item.value = parseInt(event.lastEventId, 10);
      item.textContent = typeof value === "string" ? value : JSON.stringify(value);
      list.appendChild(item);
      while (list.children.length > SHOWN) { list.removeChild(list.firstChild); }
      count = item.value + 1;
      if (state) { state.textContent = count + " value(s), open"; }
    };
    source.addEventListener("close", function (event) {
      source.close();
      var length = JSON.parse(event.data).length;
      if (state) { state.textContent = Math.max(length, count) + " value(s), closed"; }
      list.setAttribute("data-closed", "1");
    });
  }

  function checkJson(field) {
    try {
      JSON.parse(field.value || "null");
      field.classList.remove("invalid");
      field.setCustomValidity("");
      return true;
    } catch (err) {
      field.classList.add("invalid");
      field.setCustomValidity("Not JSON: " + err.message);
      return false;
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var live = document.getElementById("live");
    if (live) { startRefresh(live); }
    document.querySelectorAll("ol[data-stream]").forEach(followStream);
    document.querySelectorAll("textarea[data-json]").forEach(function (field) {
      field.addEventListener("input", function () { checkJson(field); });
    });
    document.querySelectorAll("form[data-confirm]").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        var json = form.querySelector("textarea[data-json]");
        if (json && !checkJson(json)) {
          json.reportValidity();
          event.preventDefault();
          return;
        }
        if (!window.confirm(form.getAttribute("data-confirm"))) { event.preventDefault(); }
      });
    });
  });
})();
