// The way back from the Temporal UI that Steward serves at /ui to the console's page of the run
// on screen: a link the /ui proxy adds to the UI's pages (adapters/http/temporal-ui.ts). The UI
// is a single-page app, so the link follows its address. Plain script, no dependencies.
(function () {
  'use strict';
  var link = document.createElement('a');
  link.id = 'steward-console-link';
  link.textContent = 'Open in the Steward console';
  link.setAttribute('style', 'position:fixed;right:1rem;bottom:1rem;z-index:10000;padding:.5rem .75rem;background:#0b5cad;color:#fff;border-radius:4px;font:600 14px/1.2 system-ui,sans-serif;text-decoration:underline;box-shadow:0 1px 4px rgba(0,0,0,.3)');
  function target() {
    var m = /\/workflows\/([^/]+)/.exec(location.pathname);
    if (!m) return null;
    var id;
    try {
      id = decodeURIComponent(m[1]);
    } catch (e) {
      return null;
    }
    var p = /^session:http:[^:]+:(.+)$/.exec(id);
    if (p) return '/console/chats/' + encodeURIComponent(p[1]);
    if (/^chg-[0-9a-f]+$/.test(id)) return '/console/changes/' + encodeURIComponent(id);
    p = /^objective-run:(.+?)(-\d{4}-\d\d-\d\dT.*)?$/.exec(id);
    if (p) return '/console/objectives/' + encodeURIComponent(p[1]);
    return null;
  }
  function update() {
    var t = target();
    if (!t) {
      if (link.parentNode) link.parentNode.removeChild(link);
      return;
    }
    if (link.getAttribute('href') !== t) link.setAttribute('href', t);
    if (!link.parentNode && document.body) document.body.appendChild(link);
  }
  update();
  setInterval(update, 1000);
})();
