// Kiln's results site: the index (filters, sorting, the view's state in the URL's fragment)
// and the compare view, drawn from window.KILN_SITE (data.js). Machine pages need no script.
"use strict";
(function () {
  var D = window.KILN_SITE;
  var page = document.body.getAttribute("data-page");
  var LIMIT = D.rows_drawn;  // rows drawn until the reader asks for all

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }
  function state() { return new URLSearchParams(location.hash.slice(1)); }
  function save(s) { location.replace("#" + s.toString()); }  // no history entry per click
  function unique(values) {
    return Array.from(new Set(values)).sort(function (a, b) { return String(a).localeCompare(String(b)); });
  }

  // What each filter reads of a row: the values it can match.
  var FACETS = {
    vendor: function (r) { return [D.machines[r.machine].vendor]; },
    family: function (r) { return [D.machines[r.machine].family]; },
    isa: function (r) { return D.machines[r.machine].isa; },
    gpu: function (r) { return [D.machines[r.machine].gpu || "none"]; },
    backend: function (r) { return [r.backend]; },
    model: function (r) { return [r.model]; },
    precision: function (r) { return [r.precision]; },
    // A row of a published Burn (or of no Burn: the PyTorch reference) is also a "release";
    // the index shows only those until the reader picks another Burn or "all".
    burn: function (r) { return [r.burn, r.release === false ? "checkout" : "release"]; },
    loop: function (r) { return [r.loop]; },
    runs: function (r) { return [r.runs > 1 ? "repeated" : r.runs === 1 ? "single run" : "not timed"]; }
  };
  // What each column sorts by.
  var KEYS = {
    machine: function (r) { return D.machines[r.machine].short; },
    interval: function (r) { return r.high; },
    labels: function (r) { return r.labels.join(" "); }
  };
  function key(col, r) {
    if (KEYS[col]) { return KEYS[col](r); }
    return r.values && col in r.values ? r.values[col] : r[col];
  }

  function fillSelect(select, values, chosen) {
    values.forEach(function (v) {
      var o = document.createElement("option");
      o.value = v; o.textContent = v; select.appendChild(o);
    });
    var known = Array.from(select.options).some(function (o) { return o.value === chosen; });
    select.value = known ? chosen : "";
  }

  function bar(share, cls) {
    var w = Math.max(1, Math.min(100, Math.round(share * 100)));
    return '<span class="bar ' + cls + '" style="width:' + w + '%"></span>';
  }

  function rowHtml(r, scale) {
    var m = D.machines[r.machine];
    var epoch = r.epoch === null ? "" :
      bar(Math.log(r.epoch / scale.min + 1) / Math.log(scale.max / scale.min + 1), "time");
    var vs = r.vs_pytorch === null ? "–" :
      bar(Math.min(r.vs_pytorch, 4) / 4, r.vs_pytorch <= 1 ? "fast" : "slow") + r.vs_pytorch.toFixed(2) + "×";
    return '<tr class="' + esc(r.status.replace(/ /g, "-")) + '">' + place(r) +
      '<td class="epoch">' + epoch + esc(r.epoch_text) + "</td>" +
      '<td class="num">' + esc(r.interval_text) + '</td><td class="num vs">' + vs + "</td>" +
      "<td>" + esc(r.warmup_text) + '</td><td class="num">' + esc(r.memory_text) + "</td>" +
      '<td class="num">' + esc(r.accuracy_text) + '</td><td class="num">' + r.runs + "</td>" +
      "<td>" + esc(r.date) + "</td>" + source(r, m.page + "#run-") + "</tr>";
  }
  // What every row starts with: its machine (linked to its page) and its coordinates.
  function place(r) {
    var m = D.machines[r.machine];
    return '<td><a href="' + esc(m.page) + '" title="' + esc(m.label) + '">' + esc(m.short) + "</a></td>" +
      "<td>" + esc(r.model) + "</td><td>" + esc(r.backend) + "</td><td>" + esc(r.device) + "</td>" +
      "<td>" + esc(r.precision) + "</td><td>" + esc(r.burn) + "</td>";
  }
  // And ends with: its source run (`+N`: other runs that measured it) and its labels.
  function source(r, at) {
    var also = r.also.length ? ' <span class="also" title="' + esc(r.also.join(", ")) + '">+' + r.also.length + "</span>" : "";
    var labels = r.labels.map(function (l) { return '<span class="label">' + esc(l) + "</span>"; }).join(" ");
    return '<td><a href="' + esc(at + r.run) + '">' + esc(r.run) + "</a>" + also + "</td><td>" + labels + "</td>";
  }
  // A serving row: its figures as infer.md writes them (a failed row: its status and why).
  function servingHtml(r) {
    var figures = r.texts.length === 1 ?
      '<td colspan="' + D.serving_figures + '">' + esc(r.texts[0]) + "</td>" :
      r.texts.map(function (t) { return '<td class="num">' + esc(t) + "</td>"; }).join("");
    return '<tr class="' + esc(r.status.replace(/ /g, "-")) + '">' + place(r) + figures +
      '<td class="num">' + r.runs + "</td>" + source(r, "#infer-") + "</tr>";
  }

  // Each row's filter values, read once.
  var NAMES = Object.keys(FACETS);
  D.rows.concat(D.serving_rows).forEach(function (r) {
    r.facets = NAMES.map(function (f) { return FACETS[f](r); });
  });
  function matcher(s) {
    var wanted = NAMES.map(function (f) {
      var v = s.get(f);
      if (f === "burn") { return v === "all" ? null : v || "release"; }
      return v;
    });
    return function (r) {
      for (var i = 0; i < wanted.length; i++) {
        if (wanted[i] && r.facets[i].indexOf(wanted[i]) < 0) { return false; }
      }
      return true;
    };
  }

  function sorted(rows, col, dir) {
    var sign = dir === "desc" ? -1 : 1;
    return rows.slice().sort(function (a, b) {
      var x = key(col, a), y = key(col, b);
      var xm = x === null || x === undefined, ym = y === null || y === undefined;
      if (xm || ym) { return xm === ym ? 0 : xm ? 1 : -1; }  // rows without a value last
      return (typeof x === "number" ? x - y : x < y ? -1 : x > y ? 1 : 0) * sign;
    });
  }

  // A filtered, sorted table: the index's (`rows`, drawn by rowHtml) or the serving page's.
  function drawTable(view) {
    var t0 = performance.now();
    var s = state();
    var col = s.get("sort") || view.sort, dir = s.get("dir") || "asc";
    var rows = sorted(view.rows.filter(matcher(s)), col, dir);
    var shown = s.get("all") === "1" ? rows : rows.slice(0, LIMIT);
    var times = shown.map(function (r) { return r.epoch; }).filter(function (e) { return e > 0; });
    var scale = { min: Math.min.apply(null, times.concat([1])), max: Math.max.apply(null, times.concat([1])) };
    document.querySelector("#" + view.id + " tbody").innerHTML = shown.map(function (r) { return view.html(r, scale); }).join("");
    document.querySelectorAll("#" + view.id + " th").forEach(function (th) {
      th.setAttribute("aria-sort", th.getAttribute("data-col") === col ? (dir === "asc" ? "ascending" : "descending") : "none");
    });
    document.getElementById("shown").textContent = rows.length + " of " + view.rows.length + " rows";
    var more = document.getElementById("more");
    more.innerHTML = shown.length < rows.length ? '<a href="#" id="all">Show all ' + rows.length + " rows</a>" : "";
    document.body.setAttribute("data-script-ms", (performance.now() - t0).toFixed(1));
  }

  function table(view) {
    var s = state();
    var form = document.getElementById("filters");
    var draw = function () { drawTable(view); };
    Array.from(form.querySelectorAll("select")).forEach(function (select) {
      var i = NAMES.indexOf(select.name);
      var values = unique([].concat.apply([], view.rows.map(function (r) { return r.facets[i]; })));
      if (select.name === "burn") {
        values = values.filter(function (v) { return v !== "release"; });
      }
      fillSelect(select, values, s.get(select.name));
    });
    form.addEventListener("change", function (e) {
      var st = state();
      if (e.target.value) { st.set(e.target.name, e.target.value); } else { st.delete(e.target.name); }
      st.delete("all");
      save(st); draw();
    });
    form.addEventListener("reset", function () {
      var st = state();
      NAMES.forEach(function (f) { st.delete(f); });
      save(st); setTimeout(draw, 0);
    });
    document.querySelectorAll("#" + view.id + " th").forEach(function (th) {
      th.addEventListener("click", function () {
        var st = state(), col = th.getAttribute("data-col");
        st.set("dir", st.get("sort") === col && st.get("dir") !== "desc" ? "desc" : "asc");
        st.set("sort", col);
        save(st); draw();
      });
    });
    document.getElementById("more").addEventListener("click", function (e) {
      e.preventDefault();
      var st = state(); st.set("all", "1"); save(st); draw();
    });
    draw();
  }

  // The compare view: a side is a machine and a Burn; rows meet on model, backend, device,
  // precision and loop.
  // A row without Burn (the PyTorch reference) is on every side of its machine.
  var NO_BURN = "–";
  function sides() {
    var seen = {};
    D.rows.concat(D.serving_rows).forEach(function (r) {
      var m = D.machines[r.machine];
      if (r.burn !== NO_BURN) { seen[m.id + "@" + r.burn] = m.short + " · Burn " + r.burn; }
    });
    return Object.keys(seen).sort().map(function (id) { return [id, seen[id]]; });
  }
  function cellKey(r) { return [r.model, r.backend, r.device, r.precision, r.loop || ""].join("|"); }
  function onSide(rows, id) {
    id = id || "";
    var out = {}, at = id.lastIndexOf("@");
    var machine = id.slice(0, at), burn = id.slice(at + 1);
    rows.forEach(function (r) {
      if (D.machines[r.machine].id === machine && (r.burn === burn || r.burn === NO_BURN)) { out[cellKey(r)] = r; }
    });
    return out;
  }
  function ratio(x, y) { return x !== null && y !== null && x > 0 ? y / x : null; }
  function ratioCell(v) { return '<td class="num ratio">' + (v === null ? "–" : v.toFixed(2) + "×") + "</td>"; }

  // One table of the compare view: every cell either side has, `cells(x, y)` its figures.
  function drawSides(id, rows, s, cells) {
    var a = onSide(rows, s.get("a")), b = onSide(rows, s.get("b"));
    var keys = unique(Object.keys(a).concat(Object.keys(b)));
    var both = 0;
    document.querySelector("#" + id + " tbody").innerHTML = keys.map(function (k) {
      var x = a[k], y = b[k], r = x || y;
      if (x && y) { both += 1; }
      return "<tr><td>" + esc(r.model) + "</td><td>" + esc(r.backend) + "</td><td>" + esc(r.device) +
        "</td><td>" + esc(r.precision) + "</td>" + cells(x, y, r) + "</tr>";
    }).join("");
    return [keys.length, both];
  }

  function drawCompare() {
    var s = state();
    var training = drawSides("compare", D.rows, s, function (x, y, r) {
      function time(z) { return z ? esc(z.epoch_text) : "–"; }
      function acc(z) { return z ? esc(z.accuracy_text) : "–"; }
      return "<td>" + esc(r.loop) + "</td><td>" + time(x) + "</td><td>" + time(y) + "</td>" +
        ratioCell(x && y ? ratio(x.epoch, y.epoch) : null) + "<td>" + acc(x) + "</td><td>" + acc(y) + "</td>";
    });
    var serving = drawSides("compare-serving", D.serving_rows, s, function (x, y) {
      function fig(z, name) { return z && name in z.values ? z.values[name] : null; }
      function text(z, i) { return "<td>" + (z && z.texts.length > 1 ? esc(z.texts[i]) : "–") + "</td>"; }
      return text(x, 0) + text(y, 0) + ratioCell(ratio(fig(x, "p50"), fig(y, "p50"))) +
        text(x, 4) + text(y, 4) + ratioCell(ratio(fig(x, "throughput"), fig(y, "throughput")));
    });
    document.getElementById("shown").textContent = training[0] + " cells, " + training[1] +
      " measured on both sides; serving: " + serving[0] + " rows, " + serving[1] + " on both sides";
  }

  function compare() {
    var s = state(), all = sides(), form = document.getElementById("sides");
    ["a", "b"].forEach(function (side, i) {
      var select = form.elements[side];
      all.forEach(function (pair) {
        var o = document.createElement("option");
        o.value = pair[0]; o.textContent = pair[1]; select.appendChild(o);
      });
      var chosen = s.get(side);
      select.value = chosen && all.some(function (p) { return p[0] === chosen; }) ? chosen : (all[Math.min(i, all.length - 1)] || [""])[0];
      s.set(side, select.value);
    });
    save(s);
    form.addEventListener("change", function (e) {
      var st = state(); st.set(e.target.name, e.target.value); save(st); drawCompare();
    });
    drawCompare();
  }

  if (page === "index") { table({ rows: D.rows, id: "results", html: rowHtml, sort: "epoch" }); }
  if (page === "serving") { table({ rows: D.serving_rows, id: "serving", html: servingHtml, sort: "p50" }); }
  if (page === "compare") { compare(); }
  document.body.setAttribute("data-ready", "1");
})();
