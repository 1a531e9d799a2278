"""Batched speculative decoding: B requests decoded together, one target forward a step (issue #49).

    result = generate_batch(lm, [prompt_a, prompt_b], "prompt_lookup", None, [decoding_a, decoding_b])
    result.traces[i]     # request i's Trace: its tokens are its solo run's (greedy fp32), sampling the target's
    result.timeline      # BatchStep(seconds, active, rows) per step of the batch, the prefill first

Scope: the batch's loop only. Each request is a `loop._Generation` of its own (its drafter instance,
decoding, seed, recorder, timer, stop strings), made as a solo run makes it (`loop.new_generation`);
each step runs the solo loop's own pieces on it: the draft (`_draft`), the tree cut to what can still be
committed (`_fit_tree`), the acceptance (verify.launch: accept.py's rules, with the request's own
generator), the stops, the drafter's observe and the recorder's StepRecord. What is the batch's:

- the prefill: each request alone (`loop._prefill`, exactly the solo run's), then the caches stacked
  right-padded into one batched cache (kvcache.stack);
- the verify forward: the active requests' trees padded to a common row count R (pad rows: the root
  token at the root's position, seeing its prefix and itself), one forward over [B, R] with
  per-request position ids (own valid length + depth) and a 4-D additive mask [B, 1, R, S + R]: row r
  of request b sees columns 0..lengths[b]-1 of the cache (its own prefix, not the padding after it)
  and its own tree's ancestors among the R new columns;
- the commit: each request keeps its root's and accepted nodes' rows, moved right after its own valid
  rows (kvcache.commit_batch, ragged lengths); a request that stops leaves the batch (kvcache.keep_batch);
- the hidden states a drafter reads (EAGLE's features, Medusa's hidden state, the KV cache GLIDE and
  self_draft reuse): each request gets a view of its own batch row (`_RowCapture`, CacheView(row=)).

Timing: the shared forward and commit are charged to every request that took part (each waited for
them); a request's step wall time is the batch step's, its first step's includes every request's
prefill (they run before anyone's first step). The forward-cost model's running scale is not updated
from batched forwards (their cost is the batch's, not a tree's).
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
from transformers import DynamicCache

from ..core.decoding import DecodingConfig
from ..core.timing import PeakMemory
from ..core.trace import StepRecord, Trace
from ..core.tree import DraftTree, TreeBuffers, build_buffers
from ..drafters.kit.base import DraftContext, DrafterSpec
from ..drafters.kit.choice import DrafterPlan, plan_of
from ..drafters.kit.store import DrafterStore
from ..errors import ConfigError, SpecvizError
from ..models.hidden import FINAL, HiddenCapture
from ..models.kvcache import CacheView, check_supported, commit_batch, crop_to, keep_batch, stack
from ..models.kvcache import length as cache_length
from ..models.loading import LoadedModel
from .loop import (MASK_ERRORS, ConfigLike, DecodingLike, DrafterLike, PromptLike, _apply_stops, _draft,
                   _fit_tree, _Generation, _launch, _observe, _prefill, as_decoding, as_prompt, build_trace,
                   check_model, keep_hidden, mask_refused, new_generation)
from .record import DEFAULT_RECORDER, Display, Recorder

__all__ = ["BatchRefusedError", "BatchResult", "BatchStep", "batch_steps", "generate_batch"]


@dataclass(frozen=True)
class BatchStep:
    """One step of a batch: one target forward over every request still running."""
    seconds: float                   # its wall time (the batch's prefill is the first step)
    active: tuple[int, ...]          # the requests (indices into the batch) it decoded
    rows: int                        # rows per request after padding (the prefill: the longest prompt's)


@dataclass(frozen=True)
class BatchResult:
    traces: tuple[Trace, ...]        # one per request, in the order given
    timeline: tuple[BatchStep, ...]  # the batch's steps, in order


class BatchRefusedError(SpecvizError):
    """A batch the engine cannot decode together: requests that differ where they must agree (the
    drafter, the model, the recorder). Every registered drafter batches: its per-request state is its
    own instance's, and what it reads of the target goes through a view of its own batch row."""


class _RowCapture:
    """One request's batch row of a HiddenCapture over a batched forward (what keep_hidden reads)."""

    def __init__(self, capture: HiddenCapture, slot: int) -> None:
        self.capture, self.slot = capture, slot

    def row(self, i: int) -> torch.Tensor | None:
        """Row i of this request's rows, [H]."""
        last = self.capture.last                                     # [B, R, H]
        return None if last is None else last[self.slot, i].clone()

    def rows(self, ids: list[int]) -> torch.Tensor | None:
        """The feature layers' states of this request's rows `ids`, [n, len(layers) x H]."""
        parts = []
        for layer in self.capture.layers:
            t = self.capture.last if layer == FINAL else self.capture.inputs.get(layer)   # [B, R, H]
            if t is None:
                return None
            parts.append(t[self.slot, ids])
        return torch.cat(parts, -1).clone()


@dataclass
class _Request:
    """One request of the batch: its generation and the steps it recorded."""
    g: _Generation
    steps: list[StepRecord]


def batch_steps(lm: LoadedModel, prompts: Sequence[PromptLike], drafter: DrafterLike | Sequence[DrafterPlan]
                = "vanilla", drafter_config: ConfigLike = None,
                decoding: DecodingLike | Sequence[DecodingConfig] = None, store: DrafterStore | None = None,
                recorder: str | Recorder = DEFAULT_RECORDER) -> tuple[list[list[StepRecord]], list[BatchStep]]:
    """Decode `prompts` together: each request's StepRecords and the batch's timeline (what
    `generate_batch` builds the Traces from; as generate_steps is to generate). `drafter`: one choice
    for all (each request makes its own instance) or one resolved plan per request (the same drafter:
    e.g. the oracle with each request's reference); `decoding`: one for all or one per request (each
    its own max_new_tokens, seed, stops). Everything is validated first (SpecvizError), as
    generate_steps validates a solo run."""
    check_model(lm)
    plans, decodings = _plans(prompts, drafter, drafter_config, decoding)
    gens = [new_generation(lm, p, plan, None, d, store, recorder) for p, plan, d in zip(prompts, plans, decodings)]
    requests = [_Request(g, []) for g in gens]
    timeline = _decode(lm, requests)
    return [r.steps for r in requests], timeline


def generate_batch(lm: LoadedModel, prompts: Sequence[PromptLike], drafter: DrafterLike | Sequence[DrafterPlan]
                   = "vanilla", drafter_config: ConfigLike = None,
                   decoding: DecodingLike | Sequence[DecodingConfig] = None, store: DrafterStore | None = None,
                   recorder: str | Recorder = DEFAULT_RECORDER) -> BatchResult:
    """`batch_steps` (same arguments), then one Trace per request (engine.build_trace, as a solo run's)."""
    check_model(lm)
    built = [as_prompt(lm, p) for p in prompts]
    plans, decodings = _plans(built, drafter, drafter_config, decoding)
    steps, timeline = batch_steps(lm, built, plans, None, decodings, store, recorder)
    return BatchResult(tuple(build_trace(lm, p, plan, None, d, s, recorder)
                             for p, plan, d, s in zip(built, plans, decodings, steps)), tuple(timeline))


def _plans(prompts: Sequence[PromptLike], drafter: DrafterLike | Sequence[DrafterPlan], drafter_config: ConfigLike,
           decoding: DecodingLike | Sequence[DecodingConfig]) -> tuple[list[DrafterPlan], list[DecodingConfig]]:
    """One drafter plan and one decoding per request, checked (ConfigError, BatchRefusedError)."""
    count = len(prompts)
    if count == 0:
        raise ConfigError("prompts", "give at least one request to decode")
    if isinstance(drafter, (str, DrafterSpec, DrafterPlan)):
        plans = [plan_of(drafter, drafter_config)] * count
    else:
        if len(drafter) != count:
            raise ConfigError("drafter", f"give one drafter plan per request ({count}), not {len(drafter)}")
        plans = [plan_of(d) for d in drafter]
    names = sorted({p.spec.name for p in plans})
    if len(names) > 1:
        raise BatchRefusedError(f"drafter: a batch decodes every request with one drafter, not {', '.join(names)}")
    if decoding is None or isinstance(decoding, (DecodingConfig, Mapping)):
        decodings = [as_decoding(decoding)] * count
    else:
        if len(decoding) != count:
            raise ConfigError("decoding", f"give one decoding per request ({count}), not {len(decoding)}")
        decodings = [as_decoding(d) for d in decoding]
    return plans, decodings


def _decode(lm: LoadedModel, requests: list[_Request]) -> list[BatchStep]:
    """The prefill, then batched steps until every request has stopped."""
    memory = requests[0].g.recorder.peak_memory(lm.device)     # reset here: the peak is the batch's
    clock = requests[0].g.timer.now()
    with torch.inference_mode():
        for r in requests:                                       # each alone: exactly the solo prefill
            _prefill(r.g)
        cache = stack([r.g.cache for r in requests], lm.model.config)
        check_supported(cache)
        for r in requests:
            r.g.cache = cache                                    # the batched cache is everyone's now
    lengths = [r.g.past_len for r in requests]                   # valid rows per batch slot
    prefill = requests[0].g.timer.now() - clock
    timeline = [BatchStep(prefill, tuple(range(len(requests))), max(1, max(lengths)))]
    active = list(range(len(requests)))                          # request index per batch slot
    first = True
    while active:
        start = requests[0].g.timer.now()
        with torch.inference_mode():
            rows, leaving = _step(lm, requests, active, cache, lengths, first, memory,
                                  prefill if first else 0.0, start)
        timeline.append(BatchStep(requests[0].g.timer.now() - start, tuple(active), rows))
        first = False
        if leaving:
            keep = [s for s, i in enumerate(active) if i not in leaving]
            if keep:
                with torch.inference_mode():
                    keep_batch(cache, keep)
            active = [active[s] for s in keep]
            lengths = [lengths[s] for s in keep]
            if active:
                crop_to(cache, max(lengths))                     # the longest left: no wider
    return timeline


def _step(lm: LoadedModel, requests: list[_Request], active: list[int], cache: DynamicCache, lengths: list[int],
          first: bool, memory: PeakMemory | None, prefill: float, start: float) -> tuple[int, set[int]]:
    """One batched step over the active requests (`lengths` updated in place); returns the rows
    per request and the requests that stopped."""
    gens = [requests[i].g for i in active]
    ctxs: list[DraftContext] = []
    trees: list[DraftTree] = []
    for slot, g in enumerate(gens):                                        # 1. each request drafts
        ctx = DraftContext(g.tokens, g.prompt_len, g.step, g.budget, g.cost.predict, g.timer,
                           target_cache=CacheView(cache, g.past_len, row=slot),
                           hidden=g.hidden, features=g.features, features_at=g.features_at,
                           keep_proposals=g.recorder.proposals)
        tree = _draft(g, ctx)
        with g.timer("draft.tree"):                                        # 2. cut to what can be committed
            tree = _fit_tree(tree, min(g.budget - 1, lm.max_positions - 1 - g.past_len))
        ctxs.append(ctx)
        trees.append(tree)
    rows = max(len(t) + 1 for t in trees)                                  # R
    bufs = [build_buffers(t, g.tokens[-1], g.past_len, lm.dtype, lm.device, pad_to=rows)
            for t, g in zip(trees, gens)]
    for ctx, t in zip(ctxs, trees):
        if rows > len(t) + 1:
            ctx.info["batch_pad_rows"] = rows - len(t) - 1
    batch = _batch_buffers(bufs, lengths, cache, lm)
    capture = next((g.capture for g in gens if g.capture is not None), None)
    with ExitStack() as timed:                                             # 3. one forward for all
        for g in gens:
            timed.enter_context(g.timer("verify.forward"))
        with capture or ExitStack():
            try:
                out = lm.model(input_ids=batch.input_ids, position_ids=batch.position_ids,
                               attention_mask=batch.attention_mask, past_key_values=cache, use_cache=True)
            except torch.OutOfMemoryError:
                raise
            except MASK_ERRORS as err:
                if not first:
                    raise
                raise mask_refused(lm.model, batch, err) from None
        logits = out.logits                                                # [B, R, V]
    verdicts = []
    for slot, (g, tree) in enumerate(zip(gens, trees)):                    # 4. each request judges its own
        with g.timer("verify.accept"):
            verdicts.append(_launch(g, tree, logits[slot, : len(tree) + 1].float()).verdict())   # [N+1, V]
    width = int(batch.attention_mask.shape[-1]) - rows                     # S: cache rows before the forward
    with ExitStack() as timed:                                             # 5. each commits its own rows
        for g in gens:
            timed.enter_context(g.timer("cache.commit"))
        lengths[:] = commit_batch(cache, lengths, width,
                                  [[0, *(a + 1 for a in v.acceptance.accepted)] for v in verdicts])
    leaving: set[int] = set()
    for slot, (i, g, tree, ctx, verdict) in enumerate(zip(active, gens, trees, ctxs, verdicts)):
        acc = verdict.acceptance
        if capture is not None:
            keep_hidden(g, acc, _RowCapture(capture, slot))
        past_len, budget = g.past_len, g.budget
        new, stop = _apply_stops([tree.tokens[n] for n in acc.accepted] + [acc.bonus], budget, lm, g.stops)
        g.tokens.extend(new)
        _observe(g, tree, verdict, tuple(new), ctx.info)                   # 6
        requests[i].steps.append(g.recorder.step(                          # 7
            index=g.step, committed_len=past_len + 1, tree=tree, accepted=acc.accepted, bonus=acc.bonus,
            new_tokens=tuple(new), target_top=verdict.target_top,
            display=Display(verdict.target_prob, verdict.target_top_prob, verdict.target_top_logits),
            timings=g.timer.take(), wall=prefill + g.timer.now() - start, info=ctx.info, stop=stop,
            memory=memory))
        if stop:
            leaving.add(i)
        g.step += 1
    return rows, leaving


def _batch_buffers(bufs: list[TreeBuffers], lengths: list[int], cache: DynamicCache, lm: LoadedModel) -> TreeBuffers:
    """The requests' tree buffers (each [1, R] ids and positions, [1, 1, R, lengths[b] + R] mask) as
    one batch: ids and positions [B, R], the mask [B, 1, R, S + R] with S the cache's rows: request
    b sees its own prefix (columns < lengths[b]), not the padding after it, and its own tree."""
    rows = bufs[0].rows
    width = cache_length(cache)                                  # S
    blocked = torch.finfo(lm.dtype).min
    mask = torch.full((len(bufs), 1, rows, width + rows), blocked, dtype=lm.dtype, device=lm.device)
    for b, (buf, n) in enumerate(zip(bufs, lengths)):
        mask[b, 0, :, :n] = 0.0                                  # its own committed prefix
        mask[b, 0, :, width:] = buf.attention_mask[0, 0, :, n:]  # [R, R]: its tree (and pad rows' diagonal)
    return TreeBuffers(torch.cat([b.input_ids for b in bufs]), torch.cat([b.position_ids for b in bufs]), mask)
