""""What happened at this step", in plain words, from a Trace alone (no gradio, no model).

    step_narrative(trace, k) -> Markdown

The text follows the step's life: where the draft came from (the matched suffix and where
it was found: the context, the text generated so far, a corpus, or a draft model), how many
candidates there were and why the tree has the size it has (the cost model's numbers from
the step's info, in words), what the target accepted, the first draft token it rejected with
its own choice there and that choice's probability, the bonus token, and how many target
forward passes the step saved against plain decoding (one pass per token).

The drafter's part (where its draft came from, why its tree has its size, its own forward
passes) is told by the narrator its DrafterSpec declares (`narrate`, specviz/core/narration.py),
which reads what that drafter recorded in `StepRecord.info`; this module renders it and tells
what every step has, naming no drafter and reading no drafter's notes. A trace of a drafter
this specviz does not register still gets a sensible, shorter account.

A trace file is untrusted input: every string from it (token texts, the context, a step's notes,
the drafter's name and settings) and every narrator's text is shown as written (markup.md_text,
md_code), never read as Markdown or HTML.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..core.narration import Code, Place, Quote, Scene, Sentence, StepStory
from ..core.narration import plural as _plural, were as _were
from ..core.trace import StepRecord, Trace
from ..drafters import REGISTRY
from ..drafters.kit.narration import narrate_size
from .markup import md_code, md_text
from .spans import context_sources, prompt_char_spans
from .tree import node_status

QUOTE_CHARS = 80          # longest quoted piece of text
AROUND_CHARS = 40         # context shown before a matched span


def _clip(text: str, limit: int = QUOTE_CHARS) -> str:
    text = text.replace("\n", " ⏎ ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tokens_text(trace: Trace, ids: Sequence[int]) -> str:
    return "".join(trace.token_text.get(t, f"<{t}>") for t in ids)


def _q(trace: Trace, ids: Sequence[int]) -> str:
    """Tokens quoted for Markdown (their text shown as it is)."""
    return f"“{md_text(_clip(_tokens_text(trace, ids)))}”"


def _committed(trace: Trace) -> tuple[int, ...]:
    return (*trace.prompt_ids, *trace.output_ids)


def _where(trace: Trace, start: int, end: int) -> str:
    """Where token positions [start, end) of the committed sequence lie, in words, with the
    surrounding text when they are in the user's context."""
    n_prompt = len(trace.prompt_ids)
    if start >= n_prompt:
        a, b = start - n_prompt, end - n_prompt - 1
        return "in the text generated so far (output " + (f"token {a})" if a == b else f"tokens {a}–{b})")
    if end <= n_prompt and trace.context_char_span is not None:
        chars = prompt_char_spans(trace.prompt_text, trace.prompt_pieces)
        c0, c1 = trace.context_char_span
        a, b = max(c0, chars[start][0]), min(c1, chars[end - 1][1])
        if a < b:                                           # (partly) inside the context
            before = trace.prompt_text[max(c0, a - AROUND_CHARS): a]
            after = trace.prompt_text[b: min(c1, b + AROUND_CHARS)]
            piece = _clip(trace.prompt_text[a:b])
            core = piece.strip()          # Markdown bold must not start or end with a space
            lead, tail = piece[: len(piece) - len(piece.lstrip())], piece[len(piece.rstrip()):]
            marked = f"{lead}**{md_text(core)}**{tail}" if core else md_text(piece)
            return (f"in your context, at characters {a - c0}–{b - c0}: "
                    f"“…{md_text(_clip(before, 3 * AROUND_CHARS))}{marked}{md_text(_clip(after, 3 * AROUND_CHARS))}…”")
    return "in the prompt outside your context (the chat template or the message)"


# ---- the parts of the story ---------------------------------------------------------------

def _story(trace: Trace, s: StepRecord) -> StepStory:
    """The drafter's own part, from the narrator its spec declares; a drafter this specviz
    does not register (a plugin not installed here, a bench peer) gets the kit's default, which
    tells only the tree's sizing (what TreeCutter records). A step's info comes from a trace
    file (untrusted): notes a narrator cannot read leave the shorter account, not an error."""
    spec = REGISTRY.get(trace.drafter)
    narrate = spec.narrate if spec is not None else narrate_size
    try:
        return narrate(Scene(s, _committed(trace), trace.drafter, trace.drafter_config))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return StepStory()


def _render(trace: Trace, sentence: Sentence) -> str:
    """A narrator's sentence in Markdown: text shown as it is (plain text, whatever values from
    the trace it holds), names as code, tokens quoted, places told."""
    out = []
    for piece in sentence:
        if isinstance(piece, Quote):
            out.append(_q(trace, piece.ids))
        elif isinstance(piece, Place):
            out.append(_where(trace, piece.start, piece.end))
        elif isinstance(piece, Code):
            out.append(md_code(piece.text))
        else:
            out.append(md_text(piece))
    return "".join(out)


def _source(trace: Trace, s: StepRecord, story: StepStory) -> list[str]:
    """Where the draft came from."""
    lines = [_render(trace, line) for line in story.source]
    tree = s.tree
    if len(tree):
        counts: dict[str, int] = {}
        for src in tree.sources:
            counts[src] = counts.get(src, 0) + 1
        lines.append("Draft nodes by source: " + ", ".join(f"{md_text(src)} {n}" for src, n in counts.items())
                     + _copied_from(trace, s) + ".")
    elif not lines:
        lines.append(f"The {md_code(trace.drafter)} drafter proposed nothing at this step.")
    return lines


def _copied_from(trace: Trace, s: StepRecord) -> str:
    """Where the nodes' tokens were copied from, by their recorded positions, when that is not
    all in the user's context: a drafter's source label ("context" for all of the prompt) may
    cover the chat template and the message too, and the matched text may sit outside the
    context while most of the draft came from inside it ('' without positions)."""
    positions = s.info.get("positions")
    if not positions or trace.context_char_span is None:
        return ""
    try:
        src = context_sources(trace, s.index)
    except (IndexError, TypeError, ValueError):
        return ""
    inside = len(src["accepted"]) + len(src["proposed"])
    outside = len(src["outside"])
    if not outside:
        return ""
    n_prompt = len(trace.prompt_ids)
    out_pos = [positions[i] for i in src["outside"] if i < len(positions)]
    generated = sum(1 for p in out_pos if isinstance(p, int) and p >= n_prompt)
    prompt = len(out_pos) - generated
    parts = [f"{inside} in your context"] if inside else []
    if prompt:
        parts.append(f"{prompt} elsewhere in the prompt, in the chat template or the message")
    if generated:
        parts.append(f"{generated} in the text generated so far")
    return "; by where each node's token was copied from: " + ", ".join(parts)


def _size(trace: Trace, s: StepRecord, story: StepStory) -> list[str]:
    """Why the tree has the size it has: the drafter's reasons, then the engine's pad rows."""
    lines = [_render(trace, line) for line in story.size]
    if s.info.get("pad_rows"):                  # recorded by the engine (engine/loop.py)
        rows = len(s.tree) + 1 + int(s.info["pad_rows"])
        pads = int(s.info["pad_rows"])
        lines.append(f"The forward pass ran {rows} rows: {_plural(pads, 'inert pad row')} {_were(pads)} "
                     "added because that size runs faster on this machine.")
    return lines


def _first_rejected(s: StepRecord) -> int | None:
    """The first draft node the target tested and rejected (a child of the last accepted
    node, or of the root), or None."""
    last = s.accepted[-1] if s.accepted else -1
    kids = s.tree.children.get(last, [])
    status = node_status(s)
    return next((i for i in kids if status[i] == "rejected"), None)


def _verdict(trace: Trace, s: StepRecord) -> list[str]:
    """What the target accepted, and where it disagreed."""
    tree, n = s.tree, len(s.tree)
    if not n:
        return []
    status = node_status(s)
    sampling = float(trace.decoding.get("temperature", 0.0) or 0.0) > 0
    rule = "the speculative sampling test" if sampling else "its own greedy choice"
    a = len(s.accepted)
    lines = [f"The target read all {_plural(n, 'draft node')} in **one** forward pass and, by {rule}, accepted "
             + (f"**{a}**: {_q(trace, [tree.tokens[i] for i in s.accepted])}." if a else "**none**.")]
    bad = _first_rejected(s)
    if bad is not None:
        row = tree.parents[bad] + 1                           # the parent's input row
        want = s.target_top[row] if row < len(s.target_top) else None
        p_draft = s.target_prob[bad] if bad < len(s.target_prob) else None
        text = (f"The first rejected node is node {bad} at depth {tree.depths[bad]}: the draft offered "
                f"{_q(trace, [tree.tokens[bad]])}"
                + (f" (the target's probability for it: {p_draft:.1%})" if p_draft is not None else ""))
        if want is not None:
            p_want = s.target_top_prob[row] if row < len(s.target_top_prob) else None
            text += (f"; the target's own choice there was {_q(trace, [want])}"
                     + (f" with probability {p_want:.1%}" if p_want is not None else "") + ".")
        else:
            text += "."
        siblings = [i for i in tree.children.get(tree.parents[bad], []) if i != bad and status[i] == "rejected"]
        if siblings:
            text += f" {_plural(len(siblings), 'other alternative')} at that depth were rejected too."
        lines.append(text)
    elif a:
        others = status.count("rejected")
        lines.append("The draft had nothing after the accepted path, so nothing after it was rejected"
                     + (f"; {_plural(others, 'alternative')} on the way {_were(others)} rejected." if others else "."))
    unreached = status.count("unreached")
    if unreached:
        lines.append(f"{_plural(unreached, 'node')} hung below rejected ones, so {'it' if unreached == 1 else 'they'} "
                     "could never be accepted.")
    return lines


def _bonus(trace: Trace, s: StepRecord) -> list[str]:
    if len(s.new_tokens) <= len(s.accepted):
        return [f"The step stopped ({s.stop}) before its bonus token."]
    where = "after the accepted draft" if s.accepted else ("instead of the rejected draft" if len(s.tree)
                                                          else "as in plain decoding")
    return [f"The bonus token {_q(trace, [s.bonus])} is the target's own next token {where}, read from the "
            "same forward pass, so every step commits at least one token."]


def _saved(trace: Trace, s: StepRecord, story: StepStory) -> list[str]:
    n = len(s.new_tokens)
    so_far = sum(len(t.new_tokens) - 1 for t in trace.steps[: s.index + 1])
    text = (f"This step committed {_plural(n, 'token')} for one target forward pass; plain decoding needs "
            f"one pass per token, so it saved **{_plural(n - 1, 'pass', 'passes')}** "
            f"({so_far} saved up to here, over {_plural(s.index + 1, 'step')}).")
    return [" ".join([text, *(_render(trace, line) for line in story.passes)])]


def step_narrative(trace: Trace, step_index: int) -> str:
    """Markdown: what happened at step `step_index`, in plain words."""
    s = trace.steps[step_index]
    story = _story(trace, s)
    parts: list[tuple[str, list[str]]] = [
        ("Where the draft came from", _source(trace, s, story)),
        ("Why the tree has this size", _size(trace, s, story)),
        ("What the target accepted", _verdict(trace, s) or ["There was no draft: the target computed one "
                                                            "token, as plain decoding does."]),
        ("The bonus token", _bonus(trace, s)),
        ("Forward passes saved", _saved(trace, s, story)),
    ]
    out = [f"### What happened at step {s.index}"]
    for title, lines in parts:
        if lines:
            out.append(f"**{title}.** " + " ".join(lines))
    if "drafter_error" in s.info:
        out.append(f"**Drafter error.** {md_text(s.info['drafter_error'])} (decoding went on without the drafter).")
    off = disabled_note(trace, step_index)
    if off:
        out.append(off)
    if s.stop:
        out.append(f"**The run ended here** ({md_text(s.stop)}).")
    return "\n\n".join(out)


def disabled_note(trace: Trace, step_index: int) -> str:
    """Markdown for a step after the drafter was turned off (Trace.drafter_disabled): why this
    step had no draft; '' before it failed, at the failing step (its error is told there) and
    when it never failed."""
    off = trace.drafter_disabled
    if off is None or step_index <= off["step"]:
        return ""
    return (f"**Drafter off.** {md_code(trace.drafter)} raised in {md_text(off['phase'])} at step {off['step']} "
            f"({md_text(_clip(off['error'], 160))}) and was turned off for the rest of the generation: this step "
            "decoded plainly, one token per forward pass, and so do the steps after it.")


def narrative_facts(trace: Trace, step_index: int) -> dict[str, Any]:
    """The numbers the narrative tells, as data (for tests and scripts)."""
    s = trace.steps[step_index]
    bad = _first_rejected(s)
    row = s.tree.parents[bad] + 1 if bad is not None else None
    return {
        "match_len": s.info.get("match_len"),
        "nodes": len(s.tree),
        "accepted": len(s.accepted),
        "first_rejected": bad,
        "target_choice": s.target_top[row] if row is not None and row < len(s.target_top) else None,
        "target_choice_prob": (s.target_top_prob[row] if row is not None and row < len(s.target_top_prob)
                               else None),
        "saved": len(s.new_tokens) - 1,
    }
