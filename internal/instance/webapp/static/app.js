// agentgate instance web app: progressive enhancement only. Every page
// works without this file. On a session page it follows the event stream
// (/api/event): the answer's text streams in as it comes, and the live
// part of the page (transcript, permission asks and forms, status) is
// fetched again from the server (with the session's title) when the
// session's events arrive, and each time the stream opens: what happened between the page's render
// and the stream's first open (a turn that ended meanwhile), or while it
// was down, is never missed.
(function () {
  'use strict';

  function live(root) {
    var sid = root.getAttribute('data-session');
    var liveURL = root.getAttribute('data-live');
    var box = document.getElementById('live');
    if (!sid || !liveURL || !box || !window.EventSource || !window.fetch) return;
    var stream = { id: '', text: '' };
    var timer = null, inflight = false, again = false, es = null, closedRetries = 0;

    function showStream() {
      var el = document.getElementById('streaming');
      if (!el) return;
      if (!stream.id || document.getElementById('m-' + stream.id)) {
        el.hidden = true;
        return;
      }
      el.hidden = false;
      el.querySelector('.text').textContent = stream.text; // text, never HTML
    }

    // The session's title as the live part has it (a title the title
    // agent made, or a rename elsewhere), as text.
    function showTitle() {
      var st = document.getElementById('status'), h = document.getElementById('title');
      var t = st && st.getAttribute('data-title');
      if (!h || !t || h.textContent === t) return;
      h.textContent = t;
      document.title = t + ' · agentgate instance';
    }

    function refresh() {
      if (inflight) { again = true; return; }
      inflight = true;
      fetch(liveURL, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } }).then(function (res) {
        if (!res.ok) throw new Error('live part: ' + res.status);
        return res.text();
      }).then(function (html) {
        var doc = new DOMParser().parseFromString('<section>' + html + '</section>', 'text/html');
        var fresh = doc.body.firstElementChild;
        var atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
        var kept = keepInput(box);
        box.replaceChildren.apply(box, Array.prototype.slice.call(fresh.childNodes));
        restoreInput(box, kept);
        showTitle();
        showStream();
        if (atBottom) window.scrollTo(0, document.body.scrollHeight);
        document.body.setAttribute('data-refreshed', String(Date.now()));
      }).catch(function () { /* the next event or reconnect tries again */ })
        .then(function () {
          inflight = false;
          if (again) { again = false; schedule(); }
        });
    }

    // What a person typed or picked in an ask or a form survives the
    // refresh of the live part (the new copy of the same form gets it).
    function controlKey(el) {
      var sec = el.closest('section[id]');
      var key = (sec ? sec.id : '') + '|' + el.name;
      if (el.type === 'radio' || el.type === 'checkbox') key += '|' + el.value;
      return key;
    }
    function keepInput(root) {
      var kept = { values: {}, focus: null };
      root.querySelectorAll('input[name], textarea[name]').forEach(function (el) {
        if (el.type === 'hidden' || el.type === 'submit') return;
        var k = controlKey(el);
        kept.values[k] = (el.type === 'radio' || el.type === 'checkbox') ? el.checked : el.value;
        if (el === document.activeElement) kept.focus = k;
      });
      return kept;
    }
    function restoreInput(root, kept) {
      root.querySelectorAll('input[name], textarea[name]').forEach(function (el) {
        var k = controlKey(el);
        if (!(k in kept.values)) return;
        if (el.type === 'radio' || el.type === 'checkbox') el.checked = kept.values[k];
        else el.value = kept.values[k];
        if (kept.focus === k) el.focus();
      });
    }

    function schedule() {
      if (timer) return;
      timer = setTimeout(function () { timer = null; refresh(); }, 120);
    }

    function onEvent(e) {
      var ev;
      try { ev = JSON.parse(e.data); } catch (err) { return; }
      var d = ev && ev.data;
      if (!d || d.sessionID !== sid) return;
      var t = ev.type || '';
      if (t === 'session.next.text.started' || t === 'session.next.text.delta') {
        if (d.assistantMessageID !== stream.id) stream = { id: d.assistantMessageID, text: '' };
        if (t === 'session.next.text.delta') stream.text += d.delta || '';
        showStream();
        return;
      }
      if (/\.delta$/.test(t)) return;
      schedule();
    }

    function connect() {
      es = new EventSource('/api/event');
      es.onmessage = onEvent;
      es.onopen = function () {
        closedRetries = 0;
        document.body.setAttribute('data-stream', 'open');
        // Events sent before this open are not replayed: fetch the state
        // once now (the first open too, not only a reconnect).
        refresh();
      };
      es.onerror = function () {
        document.body.setAttribute('data-stream', 'reconnecting');
        if (es.readyState === EventSource.CLOSED) {
          // the browser gave up (an error status): start over, slower
          es = null;
          setTimeout(connect, Math.min(30000, 1000 * Math.pow(2, closedRetries++)));
        }
      };
    }
    connect();
    showStream();
  }

  // The stats page's time zone defaults to the browser's.
  function timeZone() {
    var input = document.querySelector('input[data-tz]');
    if (!input || /[?&]tz=/.test(location.search)) return;
    try {
      var tz = Intl.DateTimeFormat().resolvedOptions().timeZone;
      if (tz && tz !== input.value) {
        input.value = tz;
        input.form.submit();
      }
    } catch (err) { /* keep UTC */ }
  }

  // Ctrl/Cmd+Enter sends the prompt.
  function promptKeys() {
    var ta = document.getElementById('prompt');
    if (!ta) return;
    ta.addEventListener('keydown', function (e) {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) { e.preventDefault(); ta.form.requestSubmit(); }
    });
  }

  function init() {
    var root = document.querySelector('[data-session]');
    if (root) live(root);
    timeZone();
    promptKeys();
  }
  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
