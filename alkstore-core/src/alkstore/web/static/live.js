// Live overview: re-fetch the server-rendered tables and swap them in.
// No framework, nothing from a CDN; without JavaScript the page still works.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var every = parseInt(live.getAttribute("data-every"), 10) || 2000;
  function refresh() {
    fetch(live.getAttribute("data-src"), { credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html !== null) { live.innerHTML = html; } })
      .catch(function () {})
      .then(function () { window.setTimeout(refresh, every); });
  }
  window.setTimeout(refresh, every);
})();
