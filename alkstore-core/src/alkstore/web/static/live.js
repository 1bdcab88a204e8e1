// Live overview: the server pushes the rendered tables after each read (server-sent
// events, fed by the store's wakes); where that is not possible, poll them instead.
// No framework, nothing from a CDN; without JavaScript the page still works.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var every = parseInt(live.getAttribute("data-every"), 10) || 2000;
  function poll() {
    fetch(live.getAttribute("data-src"), { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html !== null) { live.innerHTML = html; } })
      .catch(function () {})
      .then(function () { window.setTimeout(poll, every); });
  }
  var events = live.getAttribute("data-events");
  if (!events || !window.EventSource) {
    window.setTimeout(poll, every);
    return;
  }
  var source = new EventSource(events);
  source.addEventListener("overview", function (event) { live.innerHTML = event.data; });
  source.onerror = function () {
    // EventSource reconnects by itself; once it gives up (a 401, a proxy), poll.
    if (source.readyState === EventSource.CLOSED) { window.setTimeout(poll, every); }
  };
})();
