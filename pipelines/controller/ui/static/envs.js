// The Environments page, live: the server pushes the page's body again whenever the
// environments model changes (an agent's record, a run, a push to the release branch).
// Open history panels stay open across updates.
(function () {
  "use strict";
  var live = document.getElementById("envs-live");
  if (!live || !live.dataset.events) return;
  function problem(text) {
    var p = document.getElementById("problem");
    if (!p) return;
    p.textContent = text;
    p.hidden = false;
  }
  var es = new EventSource(live.dataset.events);
  es.addEventListener("envs", function (e) {
    document.body.dataset.live = "true";
    var open = {};
    live.querySelectorAll("details.history[open]").forEach(function (d) { open[d.dataset.history] = true; });
    live.innerHTML = e.data;
    live.querySelectorAll("details.history").forEach(function (d) { if (open[d.dataset.history]) d.open = true; });
    document.body.dataset.updates = String(Number(document.body.dataset.updates || 0) + 1);
  });
  es.addEventListener("problem", function (e) { problem(e.data); });
  es.onerror = function () {
    if (es.readyState === EventSource.CLOSED) problem("live updates stopped: reload the page");
  };
})();
