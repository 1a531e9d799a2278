"""Text from a trace or another upload made safe for the place the page shows it.

A trace file is untrusted input (an upload can hold any string: token texts, the prompt, a
step's notes, the drafter's settings, the model's name), and so are the other uploads (a
benchmark's results.json, a server's metrics dump), a drafter's registered name (a plugin's)
and a model's own output (it may write HTML). Every such string enters the page's markup
through one of these:

- `md_text(value)`: inline text in Markdown (gr.Markdown): shown as it is, never read as
  Markdown (emphasis, code spans, links, autolinks), HTML or a KaTeX formula; a newline is
  shown as ⏎. gradio sanitises Markdown's HTML, which stops scripts but still lets `<img>`,
  links and formatting through; escaping here shows the text instead.
- `md_code(value)`: the same, set as inline code (a name); a backtick in it cannot end the span.
- `md_block(text)`: lines of text as a preformatted block in Markdown (a fenced code block whose
  fence no line of the text can close), shown as written.
- `plot_text(value)`: text in a plotly label, tick or hover: plotly reads `<b>`, `<a href>`,
  `<span style>` and `<br>` in them; escaped, they are shown as written. A hovertemplate also
  reads `%{...}` in itself: a name goes in as the trace's `meta` (`%{meta}`), not into it.
- `html_text(value)`: text in HTML.
- `toast_text(value)`: a message for gr.Error / gr.Info, whose toasts render HTML; only `<` is
  escaped (no tag can start without it), so the /trace API's callers, who read the same
  message, still see "must be >= 1" and "R&D" as written.

gr.HTML views (spans.py, strips.py) escape with `html.escape` where they build their tags.
"""
from __future__ import annotations

import html
import re
from typing import Any

NEWLINE = " ⏎ "
# backslash-escaped: what starts Markdown inline syntax mid-line (\ ` * ~ [ ] |), an underscore
# at a word's edge (inside a word it is never emphasis), an autolink's "://", "www." and "@"
_MD_SPECIAL = re.compile(r"[\\`*~\[\]|@]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|:(?=//)|(?<=[Ww]{3})\.")
_NEWLINES = re.compile(r"\r\n|\r|\n")
# gradio renders $$...$$ in Markdown with KaTeX, over the page's text after Markdown (a backslash
# does not stop it): a dollar sign in an element of its own is never half of a delimiter
_DOLLAR = "<span>$</span>"


def html_text(value: Any) -> str:
    """`value` as text in HTML (not in an attribute): & < > escaped."""
    return html.escape(str(value), quote=False)


def toast_text(value: Any) -> str:
    """`value` as a toast's message (gr.Error, gr.Info), shown as written: no tag can start."""
    return str(value).replace("<", "&lt;")


def _md_escaped(value: Any) -> str:
    text = _NEWLINES.sub(NEWLINE, str(value))
    return html_text(_MD_SPECIAL.sub(lambda m: "\\" + m.group(0), text))


def md_text(value: Any) -> str:
    """`value` as inline Markdown text, shown literally. For the middle of a line (the views
    put it after words of their own): a newline in it is shown as ⏎, not taken as one."""
    return _md_escaped(value).replace("$", _DOLLAR)


def md_code(value: Any) -> str:
    """`value` as inline code in Markdown, shown literally. A dollar sign is written as an
    entity: gradio's Markdown keeps the text between two "$$" from Markdown (the escapes would
    show), and KaTeX never reads a `<code>` element (gradio lays code out as a flex box, where
    md_text's `<span>` would be a block of its own, cut out of the name when copied)."""
    return f"<code>{_md_escaped(value).replace('$', '&#36;')}</code>"


def md_block(text: Any) -> str:
    """`text` (lines) as a preformatted block in Markdown, shown literally: a fenced code block
    (never read as Markdown, HTML or KaTeX) whose fence is longer than any run of backticks in
    the text, so no line of it can close the block."""
    text = str(text)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def plot_text(value: Any) -> str:
    """`value` as text in a plotly figure (label, tick, hover, legend), shown literally."""
    return html_text(value)
