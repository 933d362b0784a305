// prflow UI: live run pages over server-sent events, and copy buttons. No polling loop:
// the server pushes the run's body on every state change and each log line as it is written.
(function () {
  "use strict";
  function problem(text) {
    var p = document.getElementById("problem");
    if (!p) return;
    p.textContent = text;
    p.hidden = false;
  }
  // Which diffs and collapsed lists someone opened or closed on this page, kept across live
  // updates and reloads (an approval posts and comes back) for the browser tab's session.
  var openedKey = "prflow-open:" + location.pathname;
  function opened() {
    try { return JSON.parse(sessionStorage.getItem(openedKey)) || {}; } catch (err) { return {}; }
  }
  function restoreOpened() {
    var o = opened();
    document.querySelectorAll("details[id]").forEach(function (d) {
      if (d.id in o) d.open = o[d.id];
    });
  }
  document.addEventListener("toggle", function (e) {
    var d = e.target;
    if (!d.id || d.tagName !== "DETAILS") return;
    var o = opened();
    o[d.id] = d.open;
    try { sessionStorage.setItem(openedKey, JSON.stringify(o)); } catch (err) { /* storage full or off: only this view keeps it */ }
  }, true);
  restoreOpened();
  var live = document.getElementById("live");
  if (live && live.dataset.events) {
    var runES = new EventSource(live.dataset.events);
    var last = live.innerHTML;
    runES.addEventListener("run", function (e) {
      document.body.dataset.live = "true";
      if (e.data === last) return;
      // Keep what someone is typing (an approval comment) and where the focus is.
      var typed = {}, focus = null;
      live.querySelectorAll("form.decide input[name=comment]").forEach(function (i) {
        var key = i.form.dataset.key;
        typed[key] = i.value;
        if (document.activeElement === i) focus = key;
      });
      live.innerHTML = e.data;
      last = e.data;
      restoreOpened();
      live.querySelectorAll("form.decide input[name=comment]").forEach(function (i) {
        var key = i.form.dataset.key;
        if (typed[key]) i.value = typed[key];
        if (focus === key) { i.focus(); i.setSelectionRange(i.value.length, i.value.length); }
      });
    });
    runES.addEventListener("problem", function (e) { problem(e.data); });
    runES.addEventListener("end", function () { runES.close(); document.body.dataset.ended = "true"; });
    runES.onerror = function () {
      if (runES.readyState === EventSource.CLOSED) problem("live updates stopped: reload the page");
    };
  }
  var logs = document.getElementById("logs");
  if (logs && logs.dataset.logs) {
    var logES = new EventSource(logs.dataset.logs);
    logES.addEventListener("log", function (e) {
      var l = JSON.parse(e.data);
      var line = document.createElement("div");
      line.className = "log log-" + (l.level || "").toLowerCase();
      line.textContent = l.time + " " + l.step + " " + l.level + " " + l.text;
      logs.appendChild(line);
    });
    logES.addEventListener("end", function () {
      logES.close();
      if (!logs.firstChild) logs.textContent = "(no log lines)";
    });
  }
  document.addEventListener("click", function (e) {
    var b = e.target.closest && e.target.closest("button.copy");
    if (!b) return;
    var text = b.dataset.copy;
    var done = function () { b.textContent = "copied"; setTimeout(function () { b.textContent = "copy"; }, 1500); };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { b.textContent = "copy failed"; });
    } else {
      var t = document.createElement("textarea");
      t.value = text; document.body.appendChild(t); t.select();
      try { document.execCommand("copy"); done(); } catch (err) { b.textContent = "copy failed"; }
      t.remove();
    }
  });
})();
