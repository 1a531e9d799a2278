/* specviz explorer: stepping through a run in the browser, without a round trip.
 *
 * The server sends every step's views once per run (specviz/viz/step_views.py: plotly JSON,
 * Markdown, HTML) into a hidden gr.JSON; the inspector's events (slider, Previous / Next,
 * jumps, Play) are gradio events with `js=` and no Python function, so they run here and
 * their return values update the components directly: no request reaches the server.
 * Loaded into the page's <head> (specviz/ui/keyboard.py, LAUNCH_OPTIONS).
 */
(function () {
  "use strict";
  var S = window.specviz = window.specviz || {};
  S.EMPTY = S.EMPTY || [0, "", null, null, null, "", ""];   // set by keyboard.py
  S.PLAY = S.PLAY || "▶ Play";
  S.PAUSE = S.PAUSE || "⏸ Pause";
  var playTimer = null, speed = 1;

  function clamp(k, n) { return Math.max(0, Math.min(n - 1, Math.round(+k || 0))); }

  /* a figure of the bundle as gr.Plot's value (its template put back) */
  function plot(fig, template) {
    if (!fig) return null;
    var layout = Object.assign({}, fig.layout, {template: template});
    return {type: "plotly", plot: JSON.stringify({data: fig.data, layout: layout})};
  }
  S.plot = plot;

  var KEEP = {__type__: "update"};               // gradio: leave this output as it is

  /* step k's figure drawn straight into the graph the Plot component keeps (one Plotly.react:
     no JSON round trip, no resize, no component update), with the layout gradio's Plot sets and
     the config it gave the graph (no config here: a new one drops the graph's height when the
     window is resized); KEEP then, or the figure as the Plot's value when there is no graph yet */
  function draw(id, fig, template) {
    var gd = document.querySelector("#" + id + " .js-plotly-plot");
    if (!fig || !gd || !window.Plotly) return plot(fig, template);
    var margin = Object.assign({}, fig.layout.margin, {autoexpand: true});
    if (fig.layout.title) margin.t = Math.max(100, margin.t || 0);
    var layout = Object.assign({}, fig.layout, {template: template, autosize: true, margin: margin});
    window.Plotly.react(gd, fig.data.map(function (t) { return Object.assign({}, t); }), layout);
    return KEEP;
  }

  /* outline step k's tokens in the coloured output (as viz.output_html(highlight_step=k)) */
  function outline(k) {
    var spans = document.querySelectorAll("#output-html span.sv-token");
    for (var i = 0; i < spans.length; i++) {
      spans[i].style.outline = (+spans[i].dataset.step === k) ? "2px solid #1c7ed6" : "";
    }
  }

  /* values for the inspector's outputs (slider, step text, tree, mask, timing, context,
     narrative) at step k */
  S.show = function (k, b) {
    if (!b || !b.steps || !b.steps.length) return S.EMPTY.slice();
    k = clamp(k, b.steps.length);
    var v = b.steps[k];
    outline(k);
    S.shown = k;
    return [k, v.md, draw("tree-plot", v.tree, b.template), draw("mask-plot", v.mask, b.template),
            draw("step-timing-plot", v.timing, b.template), v.context, v.narrative];
  };

  /* the step a jump button goes to from step k (k itself when there is none) */
  S.target = function (kind, k, b) {
    if (!b || !b.jumps) return +k || 0;
    var j = b.jumps[kind];
    if (Array.isArray(j)) {
      if (!j.length) return +k || 0;
      for (var i = 0; i < j.length; i++) if (j[i] > k) return j[i];
      return j[0];                                  // wrap round
    }
    return (j === null || j === undefined) ? (+k || 0) : j;
  };
  S.jump = function (kind, k, b) { return S.show(S.target(kind, +k || 0, b), b); };

  /* move the slider as a user would (its `input` event then redraws): strip clicks use it */
  S.go = function (k) {
    var range = document.querySelector("#step-slider input[type=range]");
    if (!range) return;
    var value = Math.max(+range.min, Math.min(+range.max, Math.round(+k)));
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(range, String(value));
    range.dispatchEvent(new Event("input", {bubbles: true}));
  };

  /* Play: a browser timer clicks Next ▶ at the chosen speed; at the last step it stops */
  function stop() { if (playTimer) { clearInterval(playTimer); playTimer = null; } }
  function tick() {
    var range = document.querySelector("#step-slider input[type=range]");
    if (!range || +range.value >= +range.max) {
      var btn = document.querySelector("#play-btn");
      if (btn && playTimer) btn.click(); else stop();   // the click sets the label back
      return;
    }
    var next = document.querySelector("#step-next");
    if (next) next.click();
  }
  function start() { stop(); playTimer = setInterval(tick, 1000 / speed); }
  S.playing = function () { return playTimer !== null; };
  /* Play / Pause; returns [button label, slider value] (from the start when at the end) */
  S.togglePlay = function (k, b) {
    if (playTimer || !b || !b.steps || b.steps.length < 2) { stop(); return [S.PLAY].concat(S.show(k, b)); }
    var at = clamp(k, b.steps.length);
    if (at >= b.steps.length - 1) at = 0;
    start();
    return [S.PAUSE].concat(S.show(at, b));
  };
  S.setSpeed = function (v) { speed = Math.max(0.1, +v || 1); if (playTimer) start(); return []; };

  /* a click on an acceptance strip's cell opens its step */
  document.addEventListener("click", function (e) {
    var cell = e.target && e.target.closest && e.target.closest("#accept-strip [data-step]");
    if (cell) S.go(+cell.dataset.step);
  });
})();
