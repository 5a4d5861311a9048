(function () {
  "use strict";
  // Records any script error in the DOM, visibly, so that a reader and the headless-browser
  // test both see it (the test fails when `data-report-error` is present).
  function record(message) {
    var root = document.documentElement;
    root.setAttribute("data-report-error", "1");
    var show = function () {
      var box = document.getElementById("report-js-error");
      if (!box) {
        box = document.createElement("div");
        box.id = "report-js-error";
        box.setAttribute("role", "alert");
        document.body.insertBefore(box, document.body.firstChild);
      }
      box.textContent += "Report script error: " + message + "\n";
    };
    if (document.body) { show(); } else { document.addEventListener("DOMContentLoaded", show); }
  }
  window.addEventListener("error", function (event) {
    record((event.message || "error") + " (" + (event.filename || "inline") + ":" + (event.lineno || 0) + ")");
  });
  window.addEventListener("unhandledrejection", function (event) {
    record("unhandled rejection: " + String(event.reason));
  });
  var originalError = console.error;
  console.error = function () {
    record(Array.prototype.map.call(arguments, String).join(" "));
    return originalError.apply(console, arguments);
  };
})();
