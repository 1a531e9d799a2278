"""Keyboard stepping and the browser side of the inspector, injected into the page's <head>
(LAUNCH_OPTIONS["head"]).

← and → move the inspector's step slider by one (as its own keys do when it has the focus);
the jump keys (JUMP_KEYS: r, a, w, s, d) press the inspector's jump buttons; none of them
act when the focus is in a text box, a slider or another input (where the keys keep their
own meaning) or when the inspector is hidden (another tab is open). The slider moves at
once in the page, so quick presses add up; its `input` event redraws the step in the
browser (static/explorer.js, which this head also carries).
"""
from __future__ import annotations

import json
from importlib.resources import files

PREV_ID, NEXT_ID, SLIDER_ID = "step-prev", "step-next", "step-slider"
PLAY_ID = "play-btn"
# jump: (key, button id, button label)
JUMPS = {
    "rejections": ("r", "jump-rejection", "Next rejection at depth 1"),
    "longest": ("a", "jump-longest", "Longest accepted run"),
    "widest": ("w", "jump-widest", "Widest tree"),
    "slowest": ("s", "jump-slowest", "Slowest step"),
    "divergence": ("d", "jump-divergence", "First divergence from vanilla"),
}
JUMP_KEYS = {key: elem for key, elem, _ in JUMPS.values()}


def explorer_js() -> str:
    """The browser side of the inspector (specviz/ui/static/explorer.js)."""
    return files("specviz.ui").joinpath("static", "explorer.js").read_text(encoding="utf-8")


def head(empty: list, play: str, pause: str) -> str:
    """The <head> scripts: the inspector's constants, explorer.js and the keys."""
    constants = (f"window.specviz = window.specviz || {{}}; window.specviz.EMPTY = {json.dumps(empty)}; "
                 f"window.specviz.PLAY = {json.dumps(play)}; window.specviz.PAUSE = {json.dumps(pause)};")
    return f"<script>{constants}</script>\n<script>{explorer_js()}</script>\n" + KEYS_SCRIPT


KEYS_SCRIPT = f"""<script>
document.addEventListener("keydown", function (e) {{
  if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
  var t = e.target;
  if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
  var range = document.querySelector("#{SLIDER_ID} input[type=range]");
  if (!range || range.offsetParent === null) return;
  var jumps = {json.dumps(JUMP_KEYS)};
  if (jumps[e.key]) {{
    var btn = document.getElementById(jumps[e.key]);
    if (btn) {{ e.preventDefault(); btn.click(); }}
    return;
  }}
  if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
  var value = Math.max(+range.min, Math.min(+range.max, +range.value + (e.key === "ArrowLeft" ? -1 : 1)));
  e.preventDefault();
  if (value === +range.value) return;
  Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(range, String(value));
  range.dispatchEvent(new Event("input", {{bubbles: true}}));
}});
</script>"""
