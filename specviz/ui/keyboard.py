"""Keyboard stepping: ← and → move the inspector's step slider by one (as its own keys do
when it has the focus), unless the focus is in a text box, a slider or another input (where
the keys keep their own meaning) or the inspector is hidden (another tab is open). The
slider moves at once in the page, so quick presses add up; its `input` event renders the
step (the last value wins). Injected into the page's <head> (LAUNCH_OPTIONS)."""
from __future__ import annotations

PREV_ID, NEXT_ID, SLIDER_ID = "step-prev", "step-next", "step-slider"

KEYBOARD_HEAD = f"""<script>
document.addEventListener("keydown", function (e) {{
  if (e.defaultPrevented || e.altKey || e.ctrlKey || e.metaKey || e.shiftKey) return;
  if (e.key !== "ArrowLeft" && e.key !== "ArrowRight") return;
  var t = e.target;
  if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
  var range = document.querySelector("#{SLIDER_ID} input[type=range]");
  if (!range || range.offsetParent === null) return;
  var value = Math.max(+range.min, Math.min(+range.max, +range.value + (e.key === "ArrowLeft" ? -1 : 1)));
  e.preventDefault();
  if (value === +range.value) return;
  Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, "value").set.call(range, String(value));
  range.dispatchEvent(new Event("input", {{bubbles: true}}));
}});
</script>"""
