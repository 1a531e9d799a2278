"""Colours shared by every picture: one per draft source label, one per token kind, each in a
light and a dark theme, and the plotly layout every figure uses.

Drafters label each draft node with where it came from (`DraftTree.sources`). Known labels
have fixed colours; an unknown label gets a stable colour from a fallback palette (the same
label always gets the same colour), so a new drafter is drawn without touching this file.

Token spans (spans.py) set both their background and their text colour, each through a CSS
variable whose fallback is the light theme's colour: `theme_css()` defines the variables for
the light theme (`:root`) and the dark one (`.dark`, the class Gradio puts on <body>), so
the same HTML reads in both, and outside Gradio it shows the light colours. Every pair
(background, text) has a WCAG contrast ratio of at least 4.5 (tests/test_viz.py checks the
palette, tests/test_browser.py the page). Figures have transparent backgrounds and grid
lines that read on both (`FIGURE_LAYOUT`); `theme_css()` lightens their text in dark mode.
"""
from __future__ import annotations

import re
import zlib

import plotly.graph_objects as go
import plotly.io as pio

SOURCE_COLOURS: dict[str, str] = {
    "context": "#9cc9f5",          # copied from the user's context
    "output": "#c9b6f2",           # copied from the text generated so far
    "model-db": "#f7cf8f",         # a datastore built from the model's own generations
    "corpus": "#f4b0c4",           # a retrieval corpus
    "draft-model": "#9fe0b9",      # a small draft model
    "cape-expansion": "#ffe27a",   # GLIDE with CAPE: expanded candidates
    "beam-search": "#c5e8a0",      # GLIDE + beam search: every node that was in a beam
    "lookahead": "#a6e3df",        # Jacobi / lookahead n-gram pool
    "recycled": "#b9d98c",         # Token Recycling: the target's own earlier top-k candidates
    "history": "#e8c98f",          # SuffixDecoding: outputs of earlier generations
    "oracle": "#d9d9d9",           # replay of a known continuation
}
SOURCE_COLOURS_DARK: dict[str, str] = {
    "context": "#1d4f80",
    "output": "#4f3d80",
    "model-db": "#7a5211",
    "corpus": "#802f4c",
    "draft-model": "#1e6442",
    "cape-expansion": "#6b5a00",
    "lookahead": "#1b5f5a",
    "oracle": "#4a4d52",
}
_FALLBACK = ("#f2b8a2", "#b9d98c", "#d4b3e8", "#8fd3e8", "#e8c98f", "#b7c4f0", "#e8a8d8", "#c2e0a0")
_FALLBACK_DARK = ("#7f3b24", "#46621c", "#5e3a78", "#1d5d70", "#6f5218", "#394c86", "#763769", "#4b6a26")

KIND_COLOURS: dict[str, str] = {
    "bonus": "#ffd8a8",            # the target's own token after the accepted draft
    "plain": "#f1f3f5",            # a step with no draft: plain decoding
    "accepted": "#2f9e44",         # tree: accepted node
    "rejected": "#e03131",         # tree: tested and rejected by the target
    "unreached": "#adb5bd",        # tree: never tested (an ancestor was rejected)
    "root": "#7b8794",
}
KIND_COLOURS_DARK: dict[str, str] = {"bonus": "#8a4a06", "plain": "#2f3237"}

INK = "#1a1b1e"                    # token text, light theme
INK_DARK = "#f1f3f5"               # token text, dark theme


def _fallback_index(label: str) -> int:
    return zlib.crc32(label.encode("utf-8")) % len(_FALLBACK)


def source_colour(label: str, dark: bool = False) -> str:
    """The colour of a draft source label; unknown labels get a stable fallback colour."""
    known = SOURCE_COLOURS_DARK if dark else SOURCE_COLOURS
    if label in known:
        return known[label]
    return (_FALLBACK_DARK if dark else _FALLBACK)[_fallback_index(label)]


def _var(kind: str, source: str) -> str:
    """The CSS variable holding a token kind's background ("draft" by its source label)."""
    if kind != "draft":
        return f"--sv-{kind}"
    if source in SOURCE_COLOURS:
        return "--sv-src-" + re.sub(r"[^a-z0-9-]", "-", source.lower())
    return f"--sv-fb-{_fallback_index(source)}"


def token_colours(kind: str, source: str = "", dark: bool = False) -> tuple[str, str]:
    """(background, text) of a token span of this kind ("draft" | "bonus" | "plain")."""
    if kind == "draft":
        return source_colour(source, dark), INK_DARK if dark else INK
    return (KIND_COLOURS_DARK if dark else KIND_COLOURS)[kind], INK_DARK if dark else INK


def token_style(kind: str, source: str = "") -> str:
    """Inline CSS for a token span: both colours, through the theme's variables."""
    background, ink = token_colours(kind, source)
    return f"background:var({_var(kind, source)}, {background});color:var(--sv-ink, {ink});"


def theme_css() -> str:
    """The variables token_style reads, for the light (`:root`) and dark (`.dark`) themes,
    and the dark theme's figure text (plotly writes its colours inline)."""
    def block(dark: bool) -> str:
        pairs = [("--sv-ink", INK_DARK if dark else INK)]
        pairs += [(_var(k, ""), token_colours(k, "", dark)[0]) for k in ("bonus", "plain")]
        pairs += [(_var("draft", s), source_colour(s, dark)) for s in SOURCE_COLOURS]
        pairs += [(f"--sv-fb-{i}", (_FALLBACK_DARK if dark else _FALLBACK)[i]) for i in range(len(_FALLBACK))]
        return "".join(f"{k}:{v};" for k, v in pairs)

    return (f":root{{{block(False)}}}\n.dark{{{block(True)}}}\n"
            ".dark .js-plotly-plot .main-svg text{fill:#dee2e6 !important}\n"
            ".dark .js-plotly-plot .hoverlayer .hovertext path{fill:#25262b !important}\n")


def contrast_ratio(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two "#rrggbb" colours (1 to 21)."""
    def luminance(colour: str) -> float:
        rgb = [int(colour.lstrip("#")[i: i + 2], 16) / 255 for i in (0, 2, 4)]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def _template() -> go.layout.Template:
    """plotly_white's look (its colours, fonts, axes and bars) with transparent backgrounds and
    grid lines that read on light and dark. Only what our figures use is kept: plotly checks a
    template each time a figure takes it, and the whole plotly_white (every trace type's
    defaults) cost 20 ms a figure, most of the time to draw a run's every step."""
    white = pio.templates["plotly_white"].layout
    grid = "rgba(134,142,150,0.25)"
    axis = dict(gridcolor=grid, zerolinecolor=grid, linecolor=grid, ticks="", title=dict(standoff=15),
                automargin=True, zerolinewidth=2)
    return go.layout.Template(
        layout=dict(colorway=white.colorway, font=dict(color=white.font.color), hovermode="closest",
                    hoverlabel=dict(align="left"), paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                    xaxis=axis, yaxis=axis, title=dict(x=0.05), autotypenumbers="strict",
                    shapedefaults=dict(line=dict(color=white.font.color)),
                    annotationdefaults=dict(arrowcolor=white.font.color, arrowhead=0, arrowwidth=1)),
        data=dict(bar=[go.Bar(marker=dict(line=dict(color="#E5ECF6", width=0.5)))]))


FIGURE_TEMPLATE = _template()


def wrapped(text: str, width: int = 48) -> str:
    """Our own text for a plotly title, broken into lines of at most about `width` characters
    (`<br>`), so that a narrow plot does not cut it (plotly does not wrap titles)."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(lines)


def show_token(piece: str) -> str:
    """A token's text made visible in labels: spaces and newlines get symbols."""
    out = piece.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣")
    return out if out else "∅"
