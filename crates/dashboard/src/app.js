// Live parts: any element with data-live="<SSE url>" has its content replaced by each
// `html` event; `conductor` events update the header badge. A form with data-confirm asks
// first. No framework, no build step, and no inline script anywhere: the pages' policy
// (Content-Security-Policy: script-src 'self') runs only this file.
(function () {
  document.addEventListener('submit', function (e) {
    var form = e.target;
    var question = form && form.getAttribute && form.getAttribute('data-confirm');
    if (question && !window.confirm(question)) e.preventDefault();
  });
  function badge(up) {
    var el = document.getElementById('conductor');
    if (!el) return;
    el.className = 'conductor ' + (up ? 'up' : 'down');
    el.textContent = 'conductor ' + (up ? 'connected' : 'not running');
  }
  document.querySelectorAll('[data-live]').forEach(function (el) {
    var es = new EventSource(el.getAttribute('data-live'));
    es.addEventListener('html', function (e) {
      el.innerHTML = e.data;
      el.setAttribute('data-updated', String(Date.now()));
    });
    es.addEventListener('conductor', function (e) { badge(e.data === 'up'); });
  });
})();
