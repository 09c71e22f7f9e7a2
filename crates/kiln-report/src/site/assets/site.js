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
    burn: function (r) { return [r.burn]; },
    loop: function (r) { return [r.loop]; },
    runs: function (r) { return [r.runs > 1 ? "repeated" : r.runs === 1 ? "single run" : "not timed"]; }
  };
  // What each column sorts by.
  var KEYS = {
    machine: function (r) { return D.machines[r.machine].short; },
    interval: function (r) { return r.high; },
    labels: function (r) { return r.labels.join(" "); }
  };
  function key(col, r) { return KEYS[col] ? KEYS[col](r) : r[col]; }

  function fillSelect(select, values, chosen) {
    values.forEach(function (v) {
      var o = document.createElement("option");
      o.value = v; o.textContent = v; select.appendChild(o);
    });
    select.value = values.indexOf(chosen) >= 0 ? chosen : "";
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
    var labels = r.labels.map(function (l) { return '<span class="label">' + esc(l) + "</span>"; }).join(" ");
    var also = r.also.length ? ' <span class="also" title="' + esc(r.also.join(", ")) + '">+' + r.also.length + "</span>" : "";
    return '<tr class="' + esc(r.status.replace(/ /g, "-")) + '">' +
      '<td><a href="' + esc(m.page) + '" title="' + esc(m.label) + '">' + esc(m.short) + "</a></td>" +
      "<td>" + esc(r.model) + "</td><td>" + esc(r.backend) + "</td><td>" + esc(r.device) + "</td>" +
      "<td>" + esc(r.precision) + "</td><td>" + esc(r.burn) + "</td>" +
      '<td class="epoch">' + epoch + esc(r.epoch_text) + "</td>" +
      '<td class="num">' + esc(r.interval_text) + '</td><td class="num vs">' + vs + "</td>" +
      "<td>" + esc(r.warmup_text) + '</td><td class="num">' + esc(r.memory_text) + "</td>" +
      '<td class="num">' + esc(r.accuracy_text) + '</td><td class="num">' + r.runs + "</td>" +
      "<td>" + esc(r.date) + '</td><td><a href="' + esc(m.page) + "#run-" + esc(r.run) + '">' +
      esc(r.run) + "</a>" + also + "</td><td>" + labels + "</td></tr>";
  }

  // Each row's filter values, read once.
  var NAMES = Object.keys(FACETS);
  D.rows.forEach(function (r) {
    r.facets = NAMES.map(function (f) { return FACETS[f](r); });
  });
  function matcher(s) {
    var wanted = NAMES.map(function (f) { return s.get(f); });
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

  function drawIndex() {
    var t0 = performance.now();
    var s = state();
    var col = s.get("sort") || "epoch", dir = s.get("dir") || "asc";
    var rows = sorted(D.rows.filter(matcher(s)), col, dir);
    var shown = s.get("all") === "1" ? rows : rows.slice(0, LIMIT);
    var times = shown.map(function (r) { return r.epoch; }).filter(function (e) { return e > 0; });
    var scale = { min: Math.min.apply(null, times.concat([1])), max: Math.max.apply(null, times.concat([1])) };
    document.querySelector("#results tbody").innerHTML = shown.map(function (r) { return rowHtml(r, scale); }).join("");
    document.querySelectorAll("#results th").forEach(function (th) {
      th.setAttribute("aria-sort", th.getAttribute("data-col") === col ? (dir === "asc" ? "ascending" : "descending") : "none");
    });
    document.getElementById("shown").textContent = rows.length + " of " + D.rows.length + " rows";
    var more = document.getElementById("more");
    more.innerHTML = shown.length < rows.length ? '<a href="#" id="all">Show all ' + rows.length + " rows</a>" : "";
    document.body.setAttribute("data-script-ms", (performance.now() - t0).toFixed(1));
  }

  function index() {
    var s = state();
    var form = document.getElementById("filters");
    Object.keys(FACETS).forEach(function (f) {
      var i = NAMES.indexOf(f);
      var values = unique([].concat.apply([], D.rows.map(function (r) { return r.facets[i]; })));
      fillSelect(form.elements[f], values, s.get(f));
    });
    form.addEventListener("change", function (e) {
      var st = state();
      if (e.target.value) { st.set(e.target.name, e.target.value); } else { st.delete(e.target.name); }
      st.delete("all");
      save(st); drawIndex();
    });
    form.addEventListener("reset", function () {
      var st = state();
      Object.keys(FACETS).forEach(function (f) { st.delete(f); });
      save(st); setTimeout(drawIndex, 0);
    });
    document.querySelectorAll("#results th").forEach(function (th) {
      th.addEventListener("click", function () {
        var st = state(), col = th.getAttribute("data-col");
        st.set("dir", st.get("sort") === col && st.get("dir") !== "desc" ? "desc" : "asc");
        st.set("sort", col);
        save(st); drawIndex();
      });
    });
    document.getElementById("more").addEventListener("click", function (e) {
      e.preventDefault();
      var st = state(); st.set("all", "1"); save(st); drawIndex();
    });
    drawIndex();
  }

  // The compare view: a side is a machine and a Burn; rows meet on model, backend, device,
  // precision and loop.
  // A row without Burn (the PyTorch reference) is on every side of its machine.
  var NO_BURN = "–";
  function sides() {
    var seen = {};
    D.rows.forEach(function (r) {
      var m = D.machines[r.machine];
      if (r.burn !== NO_BURN) { seen[m.id + "@" + r.burn] = m.short + " · Burn " + r.burn; }
    });
    return Object.keys(seen).sort().map(function (id) { return [id, seen[id]]; });
  }
  function cellKey(r) { return [r.model, r.backend, r.device, r.precision, r.loop].join("|"); }
  function onSide(id) {
    id = id || "";
    var out = {}, at = id.lastIndexOf("@");
    var machine = id.slice(0, at), burn = id.slice(at + 1);
    D.rows.forEach(function (r) {
      if (D.machines[r.machine].id === machine && (r.burn === burn || r.burn === NO_BURN)) { out[cellKey(r)] = r; }
    });
    return out;
  }

  function drawCompare() {
    var s = state(), a = onSide(s.get("a")), b = onSide(s.get("b"));
    var keys = unique(Object.keys(a).concat(Object.keys(b)));
    var both = 0;
    var html = keys.map(function (k) {
      var x = a[k], y = b[k], r = x || y;
      var ratio = x && y && x.epoch && y.epoch ? y.epoch / x.epoch : null;
      if (ratio !== null) { both += 1; }
      function time(z) { return z ? esc(z.epoch_text) : "–"; }
      function acc(z) { return z ? esc(z.accuracy_text) : "–"; }
      return "<tr><td>" + esc(r.model) + "</td><td>" + esc(r.backend) + "</td><td>" + esc(r.device) +
        "</td><td>" + esc(r.precision) + "</td><td>" + esc(r.loop) + "</td><td>" + time(x) + "</td><td>" + time(y) +
        '</td><td class="num ratio">' + (ratio === null ? "–" : ratio.toFixed(2) + "×") + "</td><td>" + acc(x) +
        "</td><td>" + acc(y) + "</td></tr>";
    }).join("");
    document.querySelector("#compare tbody").innerHTML = html;
    document.getElementById("shown").textContent = keys.length + " cells, " + both + " timed on both sides";
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

  if (page === "index") { index(); }
  if (page === "compare") { compare(); }
  document.body.setAttribute("data-ready", "1");
})();
