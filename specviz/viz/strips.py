"""Acceptance strips: every output token as a small cell coloured by how many draft tokens its
step accepted, so the eye finds the stretches where drafting failed.

- `acceptance_strip_html(trace)`: one strip for a run (above the output); each cell names its
  token, step and count, and clicking it opens that step (ui/static/explorer.js);
- `compare_strips_html(runs)`: in Compare, one strip per drafter aligned on vanilla's text:
  vanilla's tokens in blocks of about a line (a rule between tokens), under each block one row
  per drafter, named on its left, with a bar under each token; where a drafter's output left
  vanilla's, its bars are hatched.

The colour scale is discrete (ACCEPT_COLOURS: 0, 1, 2, 3, 4 or more accepted), the same in
both themes (the cells hold no text).
"""
from __future__ import annotations

import html
from typing import Sequence

from ..core.trace import Trace

# accepted draft tokens in the step -> colour (the last one holds for that many and more)
ACCEPT_COLOURS = ("#e03131", "#ff922b", "#fcc419", "#94d82d", "#2f9e44")
NO_DRAFT = "#adb5bd"         # a step without a draft (plain decoding)
DIFFERS = "repeating-linear-gradient(45deg,#868e96 0 2px,transparent 2px 4px)"


def token_acceptance(trace: Trace) -> list[tuple[int, int | None]]:
    """Per output token: (its step, how many draft tokens that step accepted; None without a draft)."""
    return [(s.index, len(s.accepted) if len(s.tree) else None) for s in trace.steps for _ in s.new_tokens]


def accept_colour(accepted: int | None) -> str:
    return NO_DRAFT if accepted is None else ACCEPT_COLOURS[min(accepted, len(ACCEPT_COLOURS) - 1)]


def strip_legend_html() -> str:
    chips = [(c, f"{i}{'+' if i == len(ACCEPT_COLOURS) - 1 else ''} accepted") for i, c in enumerate(ACCEPT_COLOURS)]
    chips.append((NO_DRAFT, "no draft"))
    return ('<span class="sv-strip-legend" style="font-size:0.8em;margin-left:6px">'
            + "".join(f'<span style="display:inline-block;width:10px;height:10px;background:{c};'
                      f'margin:0 3px 0 8px;vertical-align:middle"></span>{html.escape(t)}' for c, t in chips)
            + "</span>")


def acceptance_strip_html(trace: Trace | None) -> str:
    """The run's strip: a cell per output token (title: token, step, accepted), click: go there."""
    if trace is None or not trace.steps:
        return ""
    pieces = trace.output_pieces
    cells = []
    for i, (step, acc) in enumerate(token_acceptance(trace)):
        piece = pieces[i] if i < len(pieces) else ""
        what = "no draft" if acc is None else f"{acc} accepted"
        cells.append(f'<span data-step="{step}" title="{html.escape(f"token {i} {piece!r} · step {step} · {what}")}" '
                     f'style="flex:1 1 0;min-width:3px;height:14px;background:{accept_colour(acc)};cursor:pointer"></span>')
    return ('<div class="sv-strip" id="sv-accept-strip"><div style="font-size:0.85em">Each output token, coloured '
            'by how many draft tokens its step accepted (click a cell to open its step)'
            + strip_legend_html() + '</div><div style="display:flex;flex-wrap:wrap;gap:1px;margin:2px 0 6px 0">'
            + "".join(cells) + "</div></div>")


COMPARE_LINE_CHARS = 64      # vanilla's text per block of the compare strips (each block labels its rows)
# the compare strips' cells: a thin rule between tokens, a drafter's name right of its row
CELL = "padding:0 1px;border-left:1px solid rgba(134,142,150,0.5);white-space:pre;vertical-align:middle"
ROW_NAME = "font-weight:normal;font-size:0.8em;text-align:right;padding:0 6px 0 0;white-space:nowrap;opacity:0.85"
BAR = "display:block;height:8px;min-width:6px;"


def _blocks(pieces: Sequence[str], chars: int = COMPARE_LINE_CHARS) -> list[range]:
    """Token index ranges of about `chars` characters of text each (at least one token)."""
    out, start, width = [], 0, 0
    for i, piece in enumerate(pieces):
        if i > start and width + len(piece) > chars:
            out.append(range(start, i))
            start, width = i, 0
        width += max(1, len(piece))
    if start < len(pieces):
        out.append(range(start, len(pieces)))
    return out


def compare_strips_html(runs: Sequence[Trace]) -> str:
    """Vanilla's text (runs[0]) token by token, in blocks of about a line; under each block one
    labelled row per drafter (runs[1:]), a bar under each token; a thin rule between tokens."""
    if not runs:
        return ""
    ref, others = runs[0], [t for t in runs[1:] if t.steps]
    if not others:
        return ""
    per_run = [token_acceptance(t) for t in others]
    pieces = [ref.output_pieces[i] if i < len(ref.output_pieces) else "" for i in range(len(ref.output_ids))]
    names = [html.escape(t.drafter) for t in others]
    blocks = []
    for block in _blocks(pieces):
        text = "".join(f'<td class="sv-tok" style="{CELL}">{html.escape(pieces[i].replace(chr(10), "⏎")) or "∅"}</td>'
                       for i in block)
        rows = [f'<tr><th class="sv-row" scope="row" style="{ROW_NAME}">{html.escape(ref.drafter)}</th>{text}</tr>']
        for t, acc, name in zip(others, per_run, names):
            bars = []
            for i in block:
                tok = ref.output_ids[i]
                same = i < len(t.output_ids) and t.output_ids[i] == tok and t.output_ids[:i] == ref.output_ids[:i]
                if same:
                    step, n = acc[i]
                    what = "no draft" if n is None else f"{n} accepted"
                    bars.append(f'<td class="sv-bar" style="{CELL}"><i title="{html.escape(f"{t.drafter}: step {step} · {what}")}" '
                                f'style="{BAR}background:{accept_colour(n)}"></i></td>')
                else:
                    bars.append(f'<td class="sv-bar" style="{CELL}"><i title="{name}: differs from vanilla here" '
                                f'style="{BAR}background:{DIFFERS}"></i></td>')
            rows.append(f'<tr><th class="sv-row" scope="row" style="{ROW_NAME}">{name}</th>{"".join(bars)}</tr>')
        blocks.append('<table class="sv-cmp" style="border-collapse:collapse;margin:0 0 8px 0">' + "".join(rows)
                      + "</table>")
    return ('<div class="sv-strip" id="sv-compare-strips"><div style="font-size:0.85em">Vanilla\'s output, '
            'token by token (a thin rule between tokens); under it one row per drafter, named on its left: a bar '
            'under each token, coloured by how many draft tokens the drafter\'s step accepted there (hatched: its '
            'output differs from vanilla\'s)' + strip_legend_html() + '</div><div style="overflow-x:auto;'
            'font-family:ui-monospace,Menlo,monospace;font-size:0.9em;max-height:480px;overflow-y:auto">'
            + "".join(blocks) + "</div></div>")
