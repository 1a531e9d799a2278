""""What happened at this step", in plain words, from a Trace alone (no gradio, no model).

    step_narrative(trace, k) -> Markdown

The text follows the step's life: where the draft came from (the matched suffix and where
it was found: the context, the text generated so far, a corpus, or a draft model), how many
candidates there were and why the tree has the size it has (the cost model's numbers from
the step's info, in words), what the target accepted, the first draft token it rejected with
its own choice there and that choice's probability, the bonus token, and how many target
forward passes the step saved against plain decoding (one pass per token).

It reads only what drafters record in `StepRecord.info` (keys such as match_len, positions,
candidates, kept, expected_tokens, predicted_ms, plain_ms, db_hits, gamma, draft_forwards),
so an unknown drafter still gets a sensible, shorter account.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..core.trace import StepRecord, Trace
from .spans import prompt_char_spans
from .tree import node_status

QUOTE_CHARS = 80          # longest quoted piece of text
AROUND_CHARS = 40         # context shown before a matched span


def _clip(text: str, limit: int = QUOTE_CHARS) -> str:
    text = text.replace("\n", " ⏎ ").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tokens_text(trace: Trace, ids: Sequence[int]) -> str:
    return "".join(trace.token_text.get(t, f"<{t}>") for t in ids)


def _q(trace: Trace, ids: Sequence[int]) -> str:
    """Tokens quoted for Markdown."""
    return f"“{_clip(_tokens_text(trace, ids))}”"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


def _last(trace: Trace, m: int, cl: int) -> str:
    """"the last m tokens of the text, “...”" for the m tokens before position cl."""
    what = "The last token" if m == 1 else f"The last {m} tokens"
    return f"{what} of the text, {_q(trace, _committed(trace)[cl - m: cl])},"


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


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
            marked = f"{lead}**{core}**{tail}" if core else piece
            return (f"in your context, at characters {a - c0}–{b - c0}: "
                    f"“…{_clip(before, 3 * AROUND_CHARS)}{marked}{_clip(after, 3 * AROUND_CHARS)}…”")
    return "in the prompt outside your context (the chat template or the message)"


# ---- the parts of the story ---------------------------------------------------------------

def _source(trace: Trace, s: StepRecord) -> list[str]:
    """Where the draft came from."""
    info, tree = s.info, s.tree
    committed = _committed(trace)
    cl = s.committed_len
    lines: list[str] = []
    if "db_hits" in info:                                   # hierarchy: DBs keyed by the last token
        hits = info["db_hits"]
        lines.append(f"The databases were read in order of locality, keyed by the last token "
                     f"{_q(trace, committed[cl - 1: cl])}: the context DB gave "
                     f"{_plural(hits.get('context', 0), 'candidate')}, the model DB {hits.get('model-db', 0)}, "
                     f"the corpus {hits.get('corpus', 0)}.")
    elif "matches" in info:                                 # rest: a suffix array over a corpus
        m = int(info.get("match_len", 0))
        if m:
            lines.append(f"{_last(trace, m, cl)} "
                         f"occur {_plural(int(info['matches']), 'time')} in the corpus index; the "
                         f"continuations after {info.get('counted', info['matches'])} of them were counted, "
                         "and the most frequent ones form the tree.")
        else:
            lines.append("No suffix of the text was found in the corpus index, so there was nothing to draft.")
    elif "match_len" in info:                               # ngram_trie, prompt_lookup: the text itself
        m = int(info["match_len"])
        found = ""
        positions = info.get("positions") or []
        firsts = [i for i in tree.children.get(-1, []) if i < len(positions)]
        if firsts and m:
            p = int(positions[firsts[0]])
            if 0 <= p - m and committed[p - m: p] == committed[cl - m: cl]:
                found = " It was found " + _where(trace, p - m, p) + "; the draft copies what followed it."
        lines.append(f"{_last(trace, m, cl)} matched earlier text.{found}")
    elif "draft_forwards" in info or "gamma" in info:        # model drafters: no lookup
        who = f"The draft model `{info['draft_model']}`" if "draft_model" in info else \
            f"The `{trace.drafter}` drafter's model"
        lines.append(f"{who} predicted the draft from the text so far (nothing is looked up): it ran "
                     f"{_plural(int(info.get('draft_forwards', 0)), 'forward pass', 'forward passes')} of its own "
                     f"for a chain of {_plural(int(info.get('proposal_len', len(tree))), 'token')}"
                     + (f", plus {info['expansion_tokens']} alternatives from CAPE's expansion"
                        if info.get("expansion_tokens") else "") + ".")
    if "corpus" in info:
        lines.append(f"Corpus: {info['corpus']}.")
    if len(tree):
        counts: dict[str, int] = {}
        for src in tree.sources:
            counts[src] = counts.get(src, 0) + 1
        lines.append("Draft nodes by source: " + ", ".join(f"{src} {n}" for src, n in counts.items()) + ".")
    elif not lines:
        lines.append(f"The `{trace.drafter}` drafter proposed nothing at this step"
                     + (": the end of the text matched nothing it holds." if trace.drafter in
                        ("ngram_trie", "prompt_lookup", "rest", "hierarchy", "aded", "lookahead") else "."))
    return lines


def _size(trace: Trace, s: StepRecord) -> list[str]:
    """Why the tree has the size it has."""
    info, n = s.info, len(s.tree)
    cfg = trace.drafter_config
    lines: list[str] = []
    cands = info.get("candidates")
    kept = int(info.get("kept", n))
    if cands is not None:
        lines.append(f"The drafter found {_plural(int(cands), 'candidate')} and kept {_plural(kept, 'node')}.")
    if kept > n:
        lines.append(f"The engine dropped {kept - n} of them: deeper than the tokens left to generate.")
    if "expected_tokens" in info and "predicted_ms" in info and "plain_ms" in info:
        e, p, q = float(info["expected_tokens"]), float(info["predicted_ms"]), float(info["plain_ms"])
        if n:
            lines.append(f"The cost model priced a verify pass over these {_plural(n, 'node')} at {p:.0f} ms, "
                         f"against {q:.0f} ms for a plain step, and expected {e:.2f} tokens from it: "
                         f"{1000 * e / p:.1f} tokens/s against {1000 / q:.1f}. It keeps the size with the best "
                         "expected tokens per second: another node would add less in expected tokens than it "
                         "costs in time.")
        else:
            lines.append(f"The cost model cut the tree to nothing: no candidate was likely enough to pay "
                         f"for the extra rows of the forward pass (a plain step costs {q:.0f} ms), so this "
                         "step is plain decoding.")
        if "trust_first" in info:
            lines.append(f"Its learned trust in the trie's counts: {float(info['trust_first']):.2f} for the "
                         f"first draft token, {float(info.get('trust_later', 0)):.2f} for later ones.")
        if info.get("explore"):
            lines.append("This tree was kept to explore: the drafter had tested too few drafts of this kind "
                         "to trust its estimate, so it verified as many nodes as cost what one does.")
    elif cfg.get("size_by_cost") is False and n:
        cap = cfg.get("num_draft")
        lines.append("Sizing by cost is off in this run: the drafter kept its most frequent candidates"
                     + (f", up to num_draft = {cap}" if cap is not None else "") + ", whatever they cost.")
    elif "gamma" in info and n:
        lines.append(f"The chain length is gamma = {info['gamma']}"
                     + (" (adapted after each step)" if cfg.get("adaptive") else "") + ".")
    if info.get("pad_rows"):
        rows = n + 1 + int(info["pad_rows"])
        pads = int(info["pad_rows"])
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


def _saved(trace: Trace, s: StepRecord) -> list[str]:
    n = len(s.new_tokens)
    so_far = sum(len(t.new_tokens) - 1 for t in trace.steps[: s.index + 1])
    text = (f"This step committed {_plural(n, 'token')} for one target forward pass; plain decoding needs "
            f"one pass per token, so it saved **{_plural(n - 1, 'pass', 'passes')}** "
            f"({so_far} saved up to here, over {_plural(s.index + 1, 'step')}).")
    if s.info.get("draft_forwards"):
        text += f" The draft model ran {s.info['draft_forwards']} smaller passes of its own."
    return [text]


def step_narrative(trace: Trace, step_index: int) -> str:
    """Markdown: what happened at step `step_index`, in plain words."""
    s = trace.steps[step_index]
    parts: list[tuple[str, list[str]]] = [
        ("Where the draft came from", _source(trace, s)),
        ("Why the tree has this size", _size(trace, s)),
        ("What the target accepted", _verdict(trace, s) or ["There was no draft: the target computed one "
                                                            "token, as plain decoding does."]),
        ("The bonus token", _bonus(trace, s)),
        ("Forward passes saved", _saved(trace, s)),
    ]
    out = [f"### What happened at step {s.index}"]
    for title, lines in parts:
        if lines:
            out.append(f"**{title}.** " + " ".join(lines))
    if "drafter_error" in s.info:
        out.append(f"**Drafter error.** {s.info['drafter_error']} (decoding went on without the drafter).")
    off = disabled_note(trace, step_index)
    if off:
        out.append(off)
    if s.stop:
        out.append(f"**The run ended here** ({s.stop}).")
    return "\n\n".join(out)


def disabled_note(trace: Trace, step_index: int) -> str:
    """Markdown for a step after the drafter was turned off (Trace.drafter_disabled): why this
    step had no draft; '' before it failed, at the failing step (its error is told there) and
    when it never failed."""
    off = trace.drafter_disabled
    if off is None or step_index <= off["step"]:
        return ""
    return (f"**Drafter off.** `{trace.drafter}` raised in {off['phase']} at step {off['step']} "
            f"({_clip(off['error'], 160)}) and was turned off for the rest of the generation: this step "
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
