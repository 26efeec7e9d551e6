// agentgate Console: progressive enhancement only. Every page works
// without this file; it adds a Copy button for a new key's value and a
// confirmation before destructive forms.
(function () {
  'use strict';
  function copyButtons() {
    document.querySelectorAll('button[data-copy]').forEach(function (btn) {
      var input = document.getElementById(btn.getAttribute('data-copy'));
      if (!input) return;
      btn.hidden = false;
      btn.addEventListener('click', function () {
        input.focus();
        input.select();
        var done = function () {
          btn.textContent = 'Copied';
          setTimeout(function () { btn.textContent = 'Copy'; }, 2000);
        };
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(input.value).then(done, function () {
            if (document.execCommand('copy')) done();
          });
        } else if (document.execCommand('copy')) {
          done();
        }
      });
    });
  }
  function confirmations() {
    document.querySelectorAll('form[data-confirm]').forEach(function (form) {
      form.addEventListener('submit', function (e) {
        if (!window.confirm(form.getAttribute('data-confirm'))) e.preventDefault();
      });
    });
  }
  function selectSecrets() {
    document.querySelectorAll('input.secret').forEach(function (input) {
      input.addEventListener('focus', function () { input.select(); });
    });
  }
  function init() { copyButtons(); confirmations(); selectSecrets(); }
  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', init);
  } else {
    init();
  }
})();
