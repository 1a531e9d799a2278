"""The kit's narrators: the words for what the shared parts of the kit record in a step's info
(a matched suffix, a corpus, the TreeCutter's sizing, the draft-model chain), from which each
drafter's module composes the narrator its DrafterSpec declares (`narrate`). The pieces and
the explainer that renders them: specviz/core/narration.py, specviz/viz/narrative.py.

Info keys read here, by what writes them:
- a lookup over the text: match_len (tokens of the text's end that matched), positions (per
  draft node, where its token sat in the committed sequence);
- a corpus drafter: corpus (a note naming the index);
- TreeCutter (tree_cutter.py) and the drafters that size with it: candidates, kept,
  expected_tokens, predicted_ms, plain_ms, explore (and, outside the notes, the step's
  `proposal`: what the cut left out);
- the draft-model chain (chain.py): draft_forwards, gamma, proposal_len, expansion_tokens,
  draft_model.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...core.narration import Code, Place, Quote, Scene, Sentence, StepStory, plural


def last_tokens(scene: Scene, m: int) -> Sentence:
    """'The last m tokens of the text, “...”,' (the m tokens before the step)."""
    cl = scene.step.committed_len
    what = "The last token" if m == 1 else f"The last {m} tokens"
    return (f"{what} of the text, ", Quote(scene.committed[cl - m: cl]), ",")


def matched_text(scene: Scene) -> list[Sentence]:
    """A lookup over the text itself: the matched suffix, and where it was found when the
    drafter recorded its draft's positions."""
    info, tree, committed = scene.step.info, scene.step.tree, scene.committed
    if "match_len" not in info:
        return []
    m, cl = int(info["match_len"]), scene.step.committed_len
    if not m:
        return [("No suffix of the text matched earlier text, so there was nothing to draft.",)]
    found: Sentence = ()
    positions = info.get("positions") or []
    firsts = [i for i in tree.children.get(-1, []) if i < len(positions)]
    if firsts:
        p = int(positions[firsts[0]])
        if 0 <= p - m and committed[p - m: p] == committed[cl - m: cl]:
            found = (" It was found ", Place(p - m, p), "; the draft copies what followed it.")
    return [(*last_tokens(scene, m), " matched earlier text.", *found)]


def corpus_note(scene: Scene) -> list[Sentence]:
    info = scene.step.info
    return [(f"Corpus: {info['corpus']}.",)] if "corpus" in info else []


def lookup_source(scene: Scene, lines: Sequence[Sentence]) -> tuple[Sentence, ...]:
    """A lookup drafter's source story: `lines`, its corpus, and when it drafted nothing and
    has nothing else to say, that the end of the text matched nothing it holds."""
    out = [*lines, *corpus_note(scene)]
    if not out and not len(scene.step.tree):
        out.append(("The ", Code(scene.drafter), " drafter proposed nothing at this step: the end of the "
                    "text matched nothing it holds."))
    return tuple(out)


def sizing(scene: Scene, also: Sequence[Sentence] = (), otherwise: Sequence[Sentence] = ()) -> tuple[Sentence, ...]:
    """Why the tree has its size: candidates found and kept, then the cost model's choice
    (TreeCutter; `also` right after it), or sizing by cost turned off, or else `otherwise`."""
    s, cfg = scene.step, scene.config
    info, n = s.info, len(s.tree)
    lines: list[Sentence] = []
    cands = info.get("candidates")
    kept = int(info.get("kept", n))
    whole = s.proposal                   # what the sizing cut (core/proposal.py)
    if whole is not None:
        found = (f"The drafter proposed {plural(len(whole.tree), 'node')}; " if cands is None else
                 f"The drafter found {plural(int(cands), 'candidate')}"
                 + (f" and proposed {len(whole.tree)} of them; " if int(cands) > len(whole.tree) else "; "))
        lines.append((found + f"its sizing kept {len(whole.kept)}. The {whole.cut} it cut are drawn faintly in the tree: "
                      "the target never verified them.",))
    elif cands is not None:
        lines.append((f"The drafter found {plural(int(cands), 'candidate')} and kept {plural(kept, 'node')}.",))
    if kept > n:
        lines.append((f"The engine dropped {kept - n} of them: deeper than the tokens left to generate.",))
    if "expected_tokens" in info and "predicted_ms" in info and "plain_ms" in info:
        e, p, q = float(info["expected_tokens"]), float(info["predicted_ms"]), float(info["plain_ms"])
        if n:
            lines.append((f"The cost model priced a verify pass over these {plural(n, 'node')} at {p:.0f} ms, "
                          f"against {q:.0f} ms for a plain step, and expected {e:.2f} tokens from it: "
                          f"{1000 * e / p:.1f} tokens/s against {1000 / q:.1f}. It keeps the size with the best "
                          "expected tokens per second: another node would add less in expected tokens than it "
                          "costs in time.",))
        else:
            lines.append((f"The cost model cut the tree to nothing: no candidate was likely enough to pay "
                          f"for the extra rows of the forward pass (a plain step costs {q:.0f} ms), so this "
                          "step is plain decoding.",))
        lines += also
        if info.get("explore"):
            lines.append(("This tree was kept to explore: the drafter had tested too few drafts of this kind "
                          "to trust its estimate, so it verified as many nodes as cost what one does.",))
    elif cfg.get("size_by_cost") is False and n:
        cap = cfg.get("num_draft")
        lines.append(("Sizing by cost is off in this run: the drafter kept its most frequent candidates"
                      + (f", up to num_draft = {cap}" if cap is not None else "") + ", whatever they cost.",))
    else:
        lines += otherwise
    return tuple(lines)


def narrate_size(scene: Scene) -> StepStory:
    """The narrator of a drafter whose story is its tree's size alone (no lookup to tell); a
    head that stopped drafting early (drafters/eagle.py's stop_early) says so, and one drafting over
    FR-Spec's hot tokens says how many."""
    return StepStory(size=(*sizing(scene), *rounds_note(scene.step.info), *hot_vocab_note(scene.step.info)))


def hot_vocab_note(info: Mapping[str, Any]) -> tuple[Sentence, ...]:
    """What a head drafting over FR-Spec's hot tokens could propose (`hot_vocab`, drafters/eagle.py)."""
    k = int(info.get("hot_vocab") or 0)
    if k <= 0:
        return ()
    return ((f"It drafted among the {k:,} most frequent tokens only (FR-Spec's cut of the LM head, the "
             "hot_vocab setting): cheaper rounds, and the target still chooses from every token.",),)


def rounds_note(info: Mapping[str, Any]) -> tuple[Sentence, ...]:
    """Why a head drafted fewer levels than it may (`levels` of `levels_max`, a round `round_ms`,
    `stopped_early`: before a round that could not pay, drafters/eagle.py)."""
    if not info.get("stopped_early") or "levels" not in info:
        return ()
    took = f" (a round takes about {float(info['round_ms']):.0f} ms)" if "round_ms" in info else ""
    return ((f"The head drafted {info['levels']} of its {info['levels_max']} levels: another round's best "
             f"chance of an accepted token was worth less than the round's time{took}, and every deeper round "
             "could add no more.",),)


def narrate_lookup(scene: Scene) -> StepStory:
    """The narrator of a drafter that looks the text's end up in what it holds and records
    `match_len` / `positions` (a lookup over the text) or a `corpus` note."""
    return StepStory(source=lookup_source(scene, matched_text(scene)), size=sizing(scene))


def narrate_model_chain(scene: Scene) -> StepStory:
    """The narrator of a draft-model chain (chain.py: draft_model, self_draft, glide): its own
    forward passes, the chain's length gamma, CAPE's alternatives."""
    info, tree = scene.step.info, scene.step.tree
    cfg = scene.config
    source: list[Sentence] = []
    if "draft_forwards" in info or "gamma" in info:
        who: Sentence = ("The draft model ", Code(str(info["draft_model"]))) if "draft_model" in info else \
            ("The ", Code(scene.drafter), " drafter's model")
        source.append((*who, f" predicted the draft from the text so far (nothing is looked up): it ran "
                       f"{plural(int(info.get('draft_forwards', 0)), 'forward pass', 'forward passes')} of its own "
                       f"for a chain of {plural(int(info.get('proposal_len', len(tree))), 'token')}"
                       + (f", plus {info['expansion_tokens']} alternatives from CAPE's expansion"
                          if info.get("expansion_tokens") else "") + ".",))
    gamma: list[Sentence] = []
    if "gamma" in info and len(tree):
        gamma.append((f"The chain length is gamma = {info['gamma']}"
                      + (" (adapted after each step)" if cfg.get("adaptive") else "") + ".",))
    passes: tuple[Sentence, ...] = ()
    if info.get("draft_forwards"):
        passes = ((f"The draft model ran {info['draft_forwards']} smaller passes of its own.",),)
    return StepStory(source=tuple(source), size=sizing(scene, otherwise=gamma), passes=passes)
