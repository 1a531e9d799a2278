""""Verify the whole proposal", the inspector's button (no gradio here: inspector.py wires it).

Where a drafter's sizing cut its trees (StepRecord.proposal: "kept 3 of 31 proposed"), the button
runs the shown run's input again with the same drafter and settings, but with the ones that turn
its sizing off (DrafterSpec.whole_proposal: `size_by_cost = false` for every drafter that sizes
with the kit's TreeCutter), so that every node it proposes is verified, and opens the new run at
the step that drafted from the same place as the step being inspected.

- The input is the one in the page's boxes (the landing's and a Generate's are the run's own);
  it must give the shown run's prompt exactly, or the button says so and runs nothing.
- The model, the drafter's settings and the decoding are the shown run's (Trace.model_id,
  drafter_config, decoding); the precision and device map the panel's.
- "The same place": the step of the new run that starts after the same committed tokens. Under
  greedy decoding both runs write the same text (lossless), so step 0 always has one and later
  steps often do; where none starts there (the new run committed more tokens a step), the step
  that committed the tokens there.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from ..core.decoding import DecodingConfig
from ..core.settings import build
from ..core.trace import Trace
from ..drafters.kit.base import REGISTRY
from ..engine.service import RunRequest
from ..errors import SpecvizError
from ..viz.markup import md_code

WHAT = "verify the whole proposal"


class WholeProposalError(SpecvizError):
    """The shown run's whole proposal cannot be verified (said in one line, naming why)."""


def cut_steps(trace: Trace | None) -> list[int]:
    """The steps whose sizing cut the tree (they have a proposal)."""
    return [k for k, s in enumerate(trace.steps) if s.proposal is not None] if trace is not None else []


def whole_settings(trace: Trace) -> Mapping[str, Any]:
    """The settings that verify the whole proposal of `trace`'s drafter; WholeProposalError
    where there are none, or where the run had them already."""
    spec = REGISTRY.get(trace.drafter)
    uncut = spec.whole_proposal if spec is not None else None
    if not uncut:
        raise WholeProposalError(f"{WHAT}: drafter {trace.drafter!r} declares no setting that turns its sizing off "
                                 "(DrafterSpec.whole_proposal)")
    if all(trace.drafter_config.get(k) == v for k, v in uncut.items()):
        raise WholeProposalError(f"{WHAT}: this run had {settings_text(uncut)} already: every node its drafter "
                                 "proposed was verified")
    return uncut


def settings_text(values: Mapping[str, Any]) -> str:
    """'size_by_cost = false' (JSON spelling of the values)."""
    spell = {True: "true", False: "false", None: "null"}
    return ", ".join(f"{k} = {spell.get(v, v) if isinstance(v, (bool, type(None))) else v}" for k, v in values.items())


def whole_request(trace: Trace | None, form: RunRequest) -> RunRequest:
    """The request that runs `trace`'s input again with its whole proposal verified: the form's
    message, context and how the model runs (precision, device map); the trace's model, drafter,
    settings and decoding, with whole_settings on top. WholeProposalError without a cut step."""
    if trace is None or not trace.steps:
        raise WholeProposalError(f"{WHAT}: no run on the page yet; Generate one first")
    uncut = whole_settings(trace)
    if not cut_steps(trace):
        raise WholeProposalError(f"{WHAT}: no step of this run was cut by its sizing: every node its drafter "
                                 "proposed was verified already")
    settings = {**trace.drafter_config, **uncut}
    return replace(form, model_id=trace.model_id, drafter=trace.drafter, settings=tuple(settings.items()),
                   decoding=build(DecodingConfig, dict(trace.decoding)))


def check_same_prompt(trace: Trace, prompt_ids: Sequence[int]) -> None:
    """WholeProposalError unless the boxes gave the shown run's prompt (token for token)."""
    if tuple(prompt_ids) != tuple(trace.prompt_ids):
        raise WholeProposalError(f"{WHAT}: the input boxes no longer hold this run's input (its prompt has "
                                 f"{len(trace.prompt_ids)} tokens, the boxes give {len(prompt_ids)}"
                                 + (", differing" if len(prompt_ids) == len(trace.prompt_ids) else "")
                                 + "); put its context and message back, or Generate it again first")


def same_place(before: Trace, k: int, after: Trace) -> tuple[int, bool]:
    """(the step of `after` that drafted from where `before`'s step k did, True) when one starts
    after the same committed tokens; else (the step of `after` that committed the tokens there, or
    the last step before the two runs' texts part, False)."""
    old = (*before.prompt_ids, *before.output_ids)
    new = (*after.prompt_ids, *after.output_ids)
    agree = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
    place = before.steps[k].committed_len
    best = 0
    for j, s in enumerate(after.steps):
        if s.committed_len > min(place, agree):
            break
        best = j
        if s.committed_len == place:
            return j, True
    return best, False


def opened_note(before: Trace, k: int, after: Trace, j: int, exact: bool) -> str:
    """What the button did and where the page opens, in Markdown."""
    s, t = before.steps[k], after.steps[j]
    spec = REGISTRY.get(after.drafter)
    uncut = (spec.whole_proposal if spec is not None else None) or {}
    head = (f"✓ Verified the whole proposal: {md_code(after.drafter)} ran this input again with "
            f"{md_code(settings_text(uncut))}, so every node it proposed was verified.")
    if exact:
        last = (f"kept {len(s.proposal.kept)} of {len(s.proposal.tree)} proposed" if s.proposal is not None
                else f"verified {len(s.tree)}")
        where = (f" Step {j} drafted from the same place as step {k} of the last run (after {s.committed_len} "
                 f"committed tokens): {len(t.tree)} node(s) verified there, where the last run {last}.")
    else:
        where = (f" No step of this run started where step {k} of the last run did (after {s.committed_len} "
                 f"committed tokens); step {j} committed the tokens there.")
    return (head + where + f" Tokens a step: {before.totals.mean_accepted:.2f} then, "
            f"{after.totals.mean_accepted:.2f} now (the bonus token counted).")
