// Live parts: any element with data-live="<SSE url>" has its content replaced by each
// `html` event; `conductor` events update the header badge. No framework, no build step.
(function () {
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
