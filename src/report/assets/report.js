(function () {
  "use strict";

  // Every mark and row that stands for an op carries data-op="INDEX"; this links them.
  var marksByOp = new Map();
  var rowsByOp = new Map();

  function add(map, key, element) {
    var list = map.get(key);
    if (!list) { list = []; map.set(key, list); }
    list.push(element);
  }

  document.querySelectorAll("svg.roofline-chart [data-op]").forEach(function (el) {
    add(marksByOp, el.getAttribute("data-op"), el);
  });
  document.querySelectorAll("table.ops tbody tr[data-op]").forEach(function (row) {
    add(rowsByOp, row.getAttribute("data-op"), row);
  });

  // Native SVG tooltips would double the custom one: move their text to data-tip.
  document.querySelectorAll("svg.roofline-chart title").forEach(function (title) {
    var parent = title.parentNode;
    if (parent && parent.setAttribute) {
      parent.setAttribute("data-tip", title.textContent);
      parent.removeChild(title);
    }
  });

  var tooltip = document.createElement("div");
  tooltip.className = "tooltip";
  tooltip.hidden = true;
  document.body.appendChild(tooltip);

  var current = null;
  function setHighlight(op, on) {
    (marksByOp.get(op) || []).forEach(function (el) { el.classList.toggle("hl", on); });
    (rowsByOp.get(op) || []).forEach(function (el) { el.classList.toggle("hl", on); });
  }
  function highlight(op) {
    if (op === current) { return; }
    if (current !== null) { setHighlight(current, false); }
    current = op;
    if (op !== null) { setHighlight(op, true); }
  }

  function opElement(target) {
    return target && target.closest ? target.closest("[data-op]") : null;
  }

  document.addEventListener("mouseover", function (event) {
    var el = opElement(event.target);
    highlight(el ? el.getAttribute("data-op") : null);
    var tip = el && el.getAttribute("data-tip");
    if (tip) {
      tooltip.textContent = tip;
      tooltip.hidden = false;
    } else {
      tooltip.hidden = true;
    }
  });
  document.addEventListener("mousemove", function (event) {
    if (!tooltip.hidden) {
      var x = Math.min(event.clientX + 14, window.innerWidth - tooltip.offsetWidth - 8);
      tooltip.style.left = x + "px";
      tooltip.style.top = (event.clientY + 16) + "px";
    }
  });
  document.addEventListener("mouseout", function (event) {
    if (!opElement(event.relatedTarget)) {
      highlight(null);
      tooltip.hidden = true;
    }
  });

  // Clicking a mark jumps to its first visible row.
  document.addEventListener("click", function (event) {
    var el = opElement(event.target);
    if (!el || !el.closest("svg")) { return; }
    var rows = (rowsByOp.get(el.getAttribute("data-op")) || []).filter(function (row) {
      return row.offsetParent !== null;
    });
    if (rows.length) {
      rows[0].scrollIntoView({ block: "center" });
      rows[0].classList.remove("flash");
      void rows[0].offsetWidth;
      rows[0].classList.add("flash");
    }
  });

  // Sorting: numbers by their exact value (data-v), text by locale order.
  function cellKey(row, column, numeric) {
    var cell = row.cells[column];
    if (!cell) { return numeric ? -Infinity : ""; }
    var raw = cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent;
    if (numeric) {
      var value = parseFloat(raw);
      return isNaN(value) ? -Infinity : value;
    }
    return raw.trim().toLowerCase();
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    var headers = table.tHead ? Array.prototype.slice.call(table.tHead.rows[0].cells) : [];
    headers.forEach(function (th, column) {
      var button = th.querySelector("button");
      if (!button) { return; }
      button.addEventListener("click", function () {
        var numeric = th.getAttribute("data-sort") === "num";
        var ascending = th.getAttribute("aria-sort") !== "ascending";
        // Numbers read best largest first on the first click.
        if (th.getAttribute("aria-sort") === "none" && numeric) { ascending = false; }
        headers.forEach(function (other) { other.setAttribute("aria-sort", "none"); });
        th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.sort(function (a, b) {
          var x = cellKey(a, column, numeric);
          var y = cellKey(b, column, numeric);
          var order = numeric ? x - y : (x < y ? -1 : x > y ? 1 : 0);
          if (order === 0) {
            order = parseFloat(a.getAttribute("data-op")) - parseFloat(b.getAttribute("data-op"));
            return order;
          }
          return ascending ? order : -order;
        });
        var fragment = document.createDocumentFragment();
        rows.forEach(function (row) { fragment.appendChild(row); });
        body.appendChild(fragment);
      });
    });
  });

  // Filtering by text and bound; the main table also dims the chart's other dots.
  document.querySelectorAll(".controls[data-table]").forEach(function (controls) {
    var table = document.getElementById(controls.getAttribute("data-table"));
    if (!table) { return; }
    var text = controls.querySelector(".filter-text");
    var bound = controls.querySelector(".filter-bound");
    var count = controls.querySelector(".filter-count");
    var drivesChart = controls.hasAttribute("data-drives-chart");
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var haystacks = rows.map(function (row) { return row.textContent.toLowerCase(); });
    function apply() {
      var needle = text.value.trim().toLowerCase();
      var wanted = bound.value;
      var shown = 0;
      var active = needle !== "" || wanted !== "";
      rows.forEach(function (row, i) {
        var visible = (!needle || haystacks[i].indexOf(needle) >= 0) &&
          (!wanted || row.getAttribute("data-bound") === wanted);
        row.hidden = !visible;
        if (visible) { shown += 1; }
        if (drivesChart) {
          (marksByOp.get(row.getAttribute("data-op")) || []).forEach(function (el) {
            el.classList.toggle("dim", active && !visible);
          });
        }
      });
      count.textContent = shown + " of " + rows.length + " ops";
    }
    text.addEventListener("input", apply);
    bound.addEventListener("change", apply);
    apply();
  });

  // Printing shows the collapsed tables too.
  window.addEventListener("beforeprint", function () {
    document.querySelectorAll("details").forEach(function (d) { d.open = true; });
  });

  // Self-check of the chart layout with the fonts this browser really uses: count pairs of
  // overlapping labels (the renderer places them from estimated text widths).
  document.querySelectorAll("svg.roofline-chart").forEach(function (svg) {
    var labels = Array.prototype.slice.call(
      svg.querySelectorAll(".op-label, .ridge-label, text.ceiling-label:not(.memory)"));
    var boxes = labels.map(function (label) { return label.getBBox(); });
    var overlaps = 0;
    for (var i = 0; i < boxes.length; i += 1) {
      for (var j = i + 1; j < boxes.length; j += 1) {
        var a = boxes[i];
        var b = boxes[j];
        if (a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height) {
          overlaps += 1;
        }
      }
    }
    svg.setAttribute("data-label-overlaps", String(overlaps));
  });

  // How many ops have both a mark on a chart and a table row: the test compares it with the
  // number of ops drawn, so a broken link between the two shows.
  var linked = 0;
  marksByOp.forEach(function (_, op) { if (rowsByOp.has(op)) { linked += 1; } });
  document.documentElement.setAttribute("data-linked-ops", String(linked));

  document.documentElement.setAttribute("data-report-ready", "1");
})();
