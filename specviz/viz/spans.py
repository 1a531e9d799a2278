"""Highlighted text: the output coloured by how each token came, and the context coloured by
where the accepted drafts were copied from.

Token kinds: "draft" (accepted from the draft, coloured by its source label), "bonus" (the
target's own token after the accepted draft) and "plain" (a step without a draft).
HTML is built here with inline styles, so it renders the same in any front end; each token
span sets its background and its text colour through the theme's CSS variables (palette.py),
so it reads in a light and a dark page alike.
"""
from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

from ..core.trace import StepRecord, Trace
from .palette import KIND_COLOURS, source_colour, token_style


@dataclass(frozen=True)
class Span:
    text: str
    kind: str          # "draft" | "bonus" | "plain"
    source: str        # the draft node's source label ("" for bonus / plain)
    step: int
    token: int
    depth: int = 0     # draft depth (1 = first draft token); 0 for bonus / plain

    @property
    def label(self) -> str:
        return f"draft: {self.source}" if self.kind == "draft" else self.kind

    @property
    def colour(self) -> str:
        return source_colour(self.source) if self.kind == "draft" else KIND_COLOURS[self.kind]


def output_spans(steps: Sequence[StepRecord], pieces: Sequence[str]) -> list[Span]:
    """One span per committed output token, in order; `pieces` holds the text of each output
    token in its place (Trace.output_pieces, or token_pieces.PieceStream while streaming), so
    the spans join to the output text."""
    spans: list[Span] = []
    position = 0
    for s in steps:
        n_acc = len(s.accepted)
        for k, tok in enumerate(s.new_tokens):
            text = pieces[position] if position < len(pieces) else ""
            position += 1
            if k < n_acc:
                node = s.accepted[k]
                spans.append(Span(text, "draft", s.tree.sources[node], s.index, tok, s.tree.depths[node]))
            else:
                spans.append(Span(text, "bonus" if len(s.tree) else "plain", "", s.index, tok))
    return spans


def _mark(text: str, kind: str, source: str, title: str, extra: str = "", step: int | None = None) -> str:
    at = "" if step is None else f' data-step="{step}"'
    return (f'<span class="sv-token sv-{kind}"{at} title="{html.escape(title)}" style="{token_style(kind, source)}'
            f'border-radius:3px;padding:1px 0;{extra}">{html.escape(text)}</span>')


def legend_html(labels: Sequence[str]) -> str:
    """Chips for the given source labels plus the bonus and plain kinds."""
    chips = [(f"draft · {lab}", "draft", lab) for lab in labels]
    chips += [("target's bonus token", "bonus", ""), ("plain decoding", "plain", "")]
    return ('<div class="sv-legend" style="display:flex;flex-wrap:wrap;gap:6px;margin:2px 0 6px 0;font-size:0.85em">'
            + "".join(f'<span style="{token_style(kind, src)}border-radius:4px;padding:1px 8px">'
                      f'{html.escape(t)}</span>' for t, kind, src in chips) + "</div>")


def output_html(spans: Sequence[Span], highlight_step: int | None = None,
                labels: Sequence[str] = ()) -> str:
    """The output as coloured tokens (hover: step, kind, source); a legend on top.
    `highlight_step` outlines that step's tokens."""
    seen = list(dict.fromkeys([*labels, *(s.source for s in spans if s.kind == "draft")]))
    body = []
    for s in spans:
        title = f"step {s.step} · {s.label}" + (f" · draft depth {s.depth}" if s.depth else "")
        extra = "outline:2px solid #1c7ed6;" if s.step == highlight_step else ""
        body.append(_mark(s.text, s.kind, s.source, title, extra, s.step))
    text = "".join(body) or '<span style="color:#868e96">(no output yet)</span>'
    return (legend_html(seen) + '<div class="specviz-output" style="white-space:pre-wrap;'
            'line-height:1.7;font-family:ui-monospace,Menlo,monospace;font-size:0.92em;'
            f'max-height:360px;overflow-y:auto">{text}</div>')


def prompt_char_spans(prompt_text: str, pieces: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) of each prompt token in `prompt_text`, from the tokens' pieces in their
    place (Trace.prompt_pieces, special tokens kept).

    The pieces concatenate to the prompt text except where a tokenizer's decoder adds or drops
    something (a BOS marker, a space); each piece is searched for from the previous end, a short
    way ahead, so one odd piece does not shift the rest.
    """
    out, cursor = [], 0
    for piece in pieces:
        found = prompt_text.find(piece, cursor, cursor + len(piece) + 8) if piece else -1
        if found >= 0:
            out.append((found, found + len(piece)))
            cursor = found + len(piece)
        else:
            out.append((cursor, cursor))
    return out


def context_sources(trace: Trace, step_index: int) -> dict[str, list[Any]]:
    """Character spans (within the context) where the step's draft nodes were last seen,
    split into "accepted" and "proposed" (drafted but not accepted: (start, end) pairs), and
    "outside": the nodes (their indices) that came from elsewhere. Empty when the drafter
    records no positions."""
    step = trace.steps[step_index]
    positions = step.info.get("positions")
    out: dict[str, list] = {"accepted": [], "proposed": [], "outside": []}
    if not positions or trace.context_char_span is None:
        return out
    c0, c1 = trace.context_char_span
    chars = prompt_char_spans(trace.prompt_text, trace.prompt_pieces)
    accepted = set(step.accepted)
    for node, pos in enumerate(positions):
        span = chars[pos] if 0 <= pos < len(chars) else None
        if span is None or span[0] < c0 or span[1] > c1 or span[0] == span[1]:
            out["outside"].append(node)
            continue
        out["accepted" if node in accepted else "proposed"].append((span[0] - c0, span[1] - c0))
    return out


def context_highlight_html(trace: Trace, step_index: int) -> str:
    """The context with the step's accepted draft tokens' origins highlighted (and the
    rejected ones' origins underlined)."""
    if trace.context_char_span is None:
        return "<p><i>No context in this run.</i></p>"
    if not len(trace.steps[step_index].tree):
        return "<p><i>No draft in this step (plain decoding).</i></p>"
    if not trace.steps[step_index].info.get("positions"):
        labels = Counter(trace.steps[step_index].tree.sources)
        named = ", ".join(f"<code>{html.escape(k)}</code> ({v})" for k, v in labels.most_common())
        return (f"<p><i>The drafter <code>{html.escape(trace.drafter)}</code> does not record places "
                f"in the context for its drafts; this step's draft nodes came from: {named}.</i></p>")
    c0, c1 = trace.context_char_span
    context = trace.prompt_text[c0:c1]
    src = context_sources(trace, step_index)
    style = [""] * len(context)
    for a, b in src["proposed"]:
        for i in range(a, b):
            style[i] = "p"
    for a, b in src["accepted"]:
        for i in range(a, b):
            style[i] = "a"
    css = {"a": f"background:{KIND_COLOURS['accepted']}33;border-bottom:2px solid {KIND_COLOURS['accepted']}",
           "p": "border-bottom:2px dashed #adb5bd"}
    parts, i = [], 0
    while i < len(context):
        j = i
        while j < len(context) and style[j] == style[i]:
            j += 1
        chunk = html.escape(context[i:j])
        parts.append(f'<span style="{css[style[i]]}">{chunk}</span>' if style[i] else chunk)
        i = j
    n_acc, n_prop, n_out = len(src["accepted"]), len(src["proposed"]), len(src["outside"])
    note = (f"<b>{n_acc}</b> accepted draft token(s) copied from the highlighted places; "
            f"{n_prop} drafted but rejected (dashed)"
            + (f"; {n_out} from outside the context (the generated text or the chat template)" if n_out else ""))
    return (f'<div style="font-size:0.85em;margin-bottom:4px">{note}</div>'
            '<div style="white-space:pre-wrap;line-height:1.6;max-height:320px;overflow-y:auto;'
            f'font-size:0.9em">{"".join(parts)}</div>')
