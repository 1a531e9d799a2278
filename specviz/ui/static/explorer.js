/* specviz explorer: the page's browser side, all of it.
 *
 * - Stepping through a run without a round trip. The server sends every step's views once per
 *   run (specviz/viz/step_views.py: plotly JSON, Markdown, HTML) into a hidden gr.JSON; the
 *   inspector's events (slider, Previous / Next, jumps, Play) are gradio events with `js=` and
 *   no Python function, so they run here and their return values update the components
 *   directly: no request reaches the server. The views are taken by name: `config.views`
 *   (from specviz/ui/inspector.py: browser_config) lists them in the order of the events'
 *   outputs, so no list is kept here.
 * - Keys: ← → move the step slider, the jump keys press the jump buttons (not while typing in
 *   a box, nor while the inspector is hidden).
 * - Figures that fit their boxes: a plotly figure drawn while its tab was hidden is laid out
 *   700 px wide (plotly's default); every figure on the page is watched and resized to its box
 *   when that box changes size (a tab opens, the window is resized), and the draft tree's
 *   labels are fitted again to the width it is drawn at (viz/tree.py: fit_labels, the same rule).
 *
 * Loaded into the page's <head> after `window.specviz.config` (specviz/ui/page_head.py).
 */
(function () {
  "use strict";
  var S = window.specviz = window.specviz || {};
  var C = S.config || {views: [], jumps: {}, slider: "step-slider", prev: "step-prev", next: "step-next",
                       play: "play-btn", play_label: "▶ Play", pause_label: "⏸ Pause"};
  var KEEP = {__type__: "update"};               // gradio: leave this output as it is
  var playTimer = null, speed = 1;

  /* plotly.js loaded now, beside the page's own start, rather than when the first plot shows
     (after the page's data has arrived): the module gradio's Plot imports (page_head.py:
     plotly_module), so it runs once; measured against a modulepreload and against nothing,
     interleaved, this started the landing's first step view soonest */
  if (C.plotly_module) {
    import(new URL(C.plotly_module, document.baseURI).href).catch(function () {});
  }

  function clamp(k, n) { return Math.max(0, Math.min(n - 1, Math.round(+k || 0))); }
  function esc(text) {                           // as viz/markup.py's plot_text: shown as written
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  /* a figure of the bundle as gr.Plot's value (its template put back) */
  function plot(fig, template) {
    if (!fig) return null;
    var layout = Object.assign({}, fig.layout, {template: template});
    return {type: "plotly", plot: JSON.stringify({data: fig.data, layout: layout})};
  }
  S.plot = plot;

  /* plotly's typed-array JSON ({dtype, bdata}) as numbers; a plain array as it is */
  var TYPED = {f8: Float64Array, f4: Float32Array, i4: Int32Array, i2: Int16Array, i1: Int8Array,
               u4: Uint32Array, u2: Uint16Array, u1: Uint8Array};
  function numbers(v) {
    if (!v || Array.isArray(v) || ArrayBuffer.isView(v)) return v || [];
    if (v.bdata && TYPED[v.dtype]) {
      var raw = atob(v.bdata), bytes = new Uint8Array(raw.length);
      for (var i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
      return new TYPED[v.dtype](bytes.buffer);
    }
    return [];
  }

  /* ---- the draft tree's labels, fitted to the width the plot is drawn at ------------------ */
  /* the texts of the traces layout.meta.fit_labels names, each label cut so that it does not
     reach the next point on its row nor the right edge (viz/tree.py: fit_labels) */
  function fittedTexts(data, layout, plotPx) {
    var f = layout && layout.meta && layout.meta.fit_labels;
    if (!f || !layout.xaxis || !layout.xaxis.range) return null;
    var range = layout.xaxis.range, px = plotPx / Math.max(range[1] - range[0], 1e-9);
    var points = [], texts = [];
    f.traces.forEach(function (t, j) {
      var xs = numbers(data[t].x), ys = numbers(data[t].y);
      texts.push(f.labels[j].map(function () { return ""; }));
      f.labels[j].forEach(function (label, i) { points.push({j: j, i: i, x: +xs[i], y: +ys[i], label: label}); });
    });
    var rows = {};
    points.forEach(function (p) { (rows[String(p.y)] = rows[String(p.y)] || []).push(p); });
    Object.keys(rows).forEach(function (y) {
      var row = rows[y].sort(function (a, b) { return a.x - b.x; });
      row.forEach(function (p, n) {
        var next = n + 1 < row.length ? row[n + 1].x : range[1];
        var gap = n + 1 < row.length ? 2 * f.gap_px : f.gap_px;
        var room = Math.floor(((next - p.x) * px - gap) / f.char_px);
        var chars = Array.from(p.label);
        var text = chars.length <= room ? p.label : (room < 1 ? "" : chars.slice(0, room - 1).join("") + "…");
        texts[p.j][p.i] = esc(text);
      });
    });
    return {traces: f.traces, texts: texts};
  }
  S.fittedTexts = fittedTexts;

  /* the width of a graph's plot area: as drawn, else its box less the figure's margins and
     room for a y axis */
  function plotWidth(gd, layout) {
    var size = gd._fullLayout && gd._fullLayout._size;
    if (size && size.w > 0 && gd.clientWidth > 0) return size.w;
    var m = layout.margin || {};
    return Math.max(50, (gd.clientWidth || 700) - (m.l || 80) - (m.r || 80) - 45);
  }

  /* fit the tree's labels to the plot as drawn now (after a resize, or a first draw whose
     width was a guess) */
  function refit(gd) {
    if (!gd || !gd.data || !gd.layout || !gd._fullLayout) return;
    var fit = fittedTexts(gd.data, gd.layout, gd._fullLayout._size.w);
    if (!fit) return;
    var same = fit.traces.every(function (t, j) {
      var now = gd.data[t].text || [];
      return fit.texts[j].every(function (x, i) { return now[i] === x; });
    });
    if (!same) window.Plotly.restyle(gd, {text: fit.texts}, fit.traces);
  }

  /* step k's figure drawn straight into the graph the Plot component keeps (one Plotly.react:
     no JSON round trip, no component update), with the layout gradio's Plot sets and the config
     it gave the graph (a new one drops the graph's height when the window is resized); KEEP
     then, or the figure as the Plot's value when there is no graph yet */
  function draw(id, fig, template) {
    var gd = document.querySelector("#" + id + " .js-plotly-plot");
    if (!fig || !gd || !window.Plotly) return plot(fig, template);
    var margin = Object.assign({}, fig.layout.margin, {autoexpand: true});
    // as gradio's Plot: a title under the Plot's label gets room for it
    var block = gd.closest(".block"), label = block && block.querySelector("[data-testid=block-label]");
    if (fig.layout.title && label && getComputedStyle(label).display !== "none") {
      margin.t = Math.max(100, margin.t || 0);
    }
    var layout = Object.assign({}, fig.layout, {template: template, autosize: true, margin: margin});
    var data = fig.data.map(function (t) { return Object.assign({}, t); });
    var width = plotWidth(gd, layout);
    var fit = fittedTexts(data, layout, width);
    if (fit) fit.traces.forEach(function (t, j) { data[t].text = fit.texts[j]; });
    var done = window.Plotly.react(gd, data, layout);
    if (fit && done && done.then) {
      done.then(function () {
        if (gd._fullLayout && Math.abs(gd._fullLayout._size.w - width) > 2) refit(gd);
      });
    }
    return KEEP;
  }

  /* ---- every figure sized to its box ------------------------------------------------------- */
  function fitBox(gd) {
    if (!gd || !gd._fullLayout || !window.Plotly || gd.clientWidth === 0) return;
    if (Math.abs((gd._fullLayout.width || 0) - gd.clientWidth) <= 1) return;
    var resized = window.Plotly.Plots.resize(gd);          // redrawn: its labels refit after (below)
    if (resized && resized.catch) resized.catch(function () {});
  }
  S.fitBox = fitBox;
  S.fitAll = function () {
    document.querySelectorAll(".js-plotly-plot").forEach(fitBox);
  };
  var watched = new WeakSet(), pending = null;
  var boxes = window.ResizeObserver ? new ResizeObserver(function (entries) {
    entries.forEach(function (e) { window.requestAnimationFrame(function () { fitBox(e.target); }); });
  }) : null;
  function watchNew() {
    pending = null;
    document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
      if (watched.has(gd)) return;
      watched.add(gd);
      if (boxes) boxes.observe(gd);
      // after every draw (gradio's, ours, a resize): the tree's labels fitted to the width drawn
      if (gd.on) gd.on("plotly_afterplot", function () { refit(gd); });
      fitBox(gd);
    });
  }
  function start() {
    watchNew();
    new MutationObserver(function () {
      if (pending === null) pending = window.requestAnimationFrame(watchNew);
    }).observe(document.body, {childList: true, subtree: true});
  }
  if (document.body) start(); else document.addEventListener("DOMContentLoaded", start);
  /* a tab opened: its figures were laid out hidden (the observer sees it too; this is the
     fallback where a box keeps its width while hidden) */
  document.addEventListener("click", function (e) {
    if (e.target && e.target.closest && e.target.closest("[role=tab]")) {
      window.setTimeout(S.fitAll, 60);
    }
  });

  /* ---- stepping ---------------------------------------------------------------------------- */
  /* outline step k's tokens in the coloured output (as viz.output_html(highlight_step=k)) */
  function outline(k) {
    var spans = document.querySelectorAll("#output-html span.sv-token");
    for (var i = 0; i < spans.length; i++) {
      spans[i].style.outline = (+spans[i].dataset.step === k) ? "2px solid #1c7ed6" : "";
    }
  }

  function keepAll(note) {
    return [KEEP].concat(C.views.map(function () { return KEEP; }), [note === undefined ? KEEP : note]);
  }

  /* values for the inspector's outputs at step k: the slider, each view (config.views' order),
     the jump note */
  S.show = function (k, b, note) {
    if (!b || !b.steps || !b.steps.length) {
      return [0].concat(C.views.map(function (v) { return v.empty; }), [note || ""]);
    }
    k = clamp(k, b.steps.length);
    var step = b.steps[k];
    outline(k);
    S.shown = k;
    return [k].concat(C.views.map(function (v) {
      return v.kind === "plot" ? draw(v.id, step[v.name], b.template) : step[v.name];
    }), [note || ""]);
  };

  /* a run's views have arrived (chained after the server's event): draw the step the slider
     is on; without views (cleared: a run being made) leave the page as the server set it */
  S.opened = function (k, b) {
    if (!b || !b.steps || !b.steps.length) return keepAll();
    return S.show(k, b);
  };

  /* the step a jump button goes to from step k (null when there is none) */
  S.target = function (kind, k, b) {
    if (!b || !b.jumps) return null;
    var j = b.jumps[kind];
    if (Array.isArray(j)) {
      if (!j.length) return null;
      for (var i = 0; i < j.length; i++) if (j[i] > k) return j[i];
      return j[0];                                  // wrap round
    }
    return (j === null || j === undefined) ? null : j;
  };
  /* go there, or say why there is nowhere to go (the view stays where it is) */
  S.jump = function (kind, k, b) {
    var to = S.target(kind, +k || 0, b);
    if (to === null) {
      var why = b && b.jump_notes && b.jump_notes[kind];
      return keepAll("*" + (why || "No run on the page yet: Generate, step, or load a trace.") + "*");
    }
    return S.show(to, b);
  };

  /* move the slider as a user would (its `input` event then redraws): strip clicks use it */
  S.go = function (k) {
    var range = document.querySelector("#" + C.slider + " input[type=range]");
    if (!range) return;
    var value = Math.max(+range.min, Math.min(+range.max, Math.round(+k)));
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(range, String(value));
    range.dispatchEvent(new Event("input", {bubbles: true}));
  };

  /* Play: a browser timer clicks Next ▶ at the chosen speed; at the last step it stops */
  function stopPlay() { if (playTimer) { clearInterval(playTimer); playTimer = null; } }
  function tick() {
    var range = document.querySelector("#" + C.slider + " input[type=range]");
    if (!range || +range.value >= +range.max) {
      var btn = document.getElementById(C.play);
      if (btn && playTimer) btn.click(); else stopPlay();   // the click sets the label back
      return;
    }
    var next = document.getElementById(C.next);
    if (next) next.click();
  }
  function startPlay() { stopPlay(); playTimer = setInterval(tick, 1000 / speed); }
  S.playing = function () { return playTimer !== null; };
  /* Play / Pause; returns [button label, the step's outputs] (from the start when at the end) */
  S.togglePlay = function (k, b) {
    if (playTimer || !b || !b.steps || b.steps.length < 2) { stopPlay(); return [C.play_label].concat(S.show(k, b)); }
    var at = clamp(k, b.steps.length);
    if (at >= b.steps.length - 1) at = 0;
    startPlay();
    return [C.pause_label].concat(S.show(at, b));
  };
  S.setSpeed = function (v) { speed = Math.max(0.1, +v || 1); if (playTimer) startPlay(); return []; };

  /* a click on an acceptance strip's cell opens its step */
  document.addEventListener("click", function (e) {
    var cell = e.target && e.target.closest && e.target.closest("#accept-strip [data-step]");
    if (cell) S.go(+cell.dataset.step);
  });

  /* ← → and the jump keys, anywhere on the page but in a box, while the inspector shows */
  document.addEventListener("keydown", function (e) {
    if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
    var t = e.target;
    if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
    var range = document.querySelector("#" + C.slider + " input[type=range]");
    if (!range || range.offsetParent === null) return;
    if (C.jumps[e.key]) {
      var btn = document.getElementById(C.jumps[e.key]);
      if (btn) { e.preventDefault(); btn.click(); }
      return;
    }
    if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
    var value = Math.max(+range.min, Math.min(+range.max, +range.value + (e.key === "ArrowLeft" ? -1 : 1)));
    e.preventDefault();
    if (value === +range.value) return;
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(range, String(value));
    range.dispatchEvent(new Event("input", {bubbles: true}));
  });
})();
