"""The engine: one loop for every drafter, yielding a StepRecord per speculative step.

    generate_steps(lm, prompt, "ngram_trie", {...}, DecodingConfig())  -> Iterator[StepRecord]
    generate(lm, prompt, "ngram_trie", {...}, DecodingConfig())        -> Trace

`drafter` is a registered drafter's name, a choice as the CLI writes it (`ngram_trie@paper`,
`ngram_trie[n=8]`), a DrafterSpec the registry does not list (the authors' code as a bench
peer, specviz/peers/) or a resolved DrafterPlan (the run service's); drafters.kit.choice.plan_of
resolves it. `recorder` (record.py: teach, bench, off) says what each step keeps beyond its text.

Each step, one function each (a generation's state is a `_Generation`):
1 draft (`_draft`) -> 2 the tree's buffers: input rows, positions, mask (`_buffers`) -> 3 one
target forward over the tree, 4 the acceptance judged on the logits' device with one transfer
back (`_forward_and_judge`; verify.py, accept.py) -> 5 commit the accepted KV rows (`_commit`) ->
6 the drafter observes (`_observe`) -> 7 record what the recorder keeps (record.py). A drafter that raises, or proposes a token id outside the
vocabulary, is switched off for the rest of the generation (the step degrades to plain
decoding) and the error is recorded; the text generated so far is never lost. Settings that
hold token ids (kind "token_ids") are checked against the vocabulary before the run starts.
"""
from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Protocol, Sequence

import torch
from transformers import DynamicCache

from .. import drafters as _drafters  # noqa: F401  (registers the built-in drafters)
from ..core.decoding import DecodingConfig
from ..core.settings import Settings, build, describe, to_dict
from ..core.timing import PhaseTimer
from ..core.trace import StepRecord, Totals, Trace
from ..core.tree import DraftTree, TreeBuffers, build_buffers
from ..drafters.kit.base import DraftContext, Drafter, DrafterNeeds, DrafterSpec, DraftSetup, StepView, needs_of
from ..drafters.kit.choice import DrafterPlan, plan_of
from ..drafters.kit.store import DrafterStore
from ..errors import ConfigError, ModelLoadError, PromptError
from ..models.cost import VerifyCost
from ..models.hidden import HiddenCapture
from ..models.kvcache import AnyCache, CacheView, check_supported, commit, new_cache
from ..models.loading import LoadedModel
from ..models.prompts import Prompt, build_prompt
from ..models.static_step import generation_cache, release
from ..models.token_pieces import StopText, incremental_pieces, token_labels
from .accept import Acceptance
from .record import DEFAULT_RECORDER, Display, Recorder, recorder as recorder_named
from .verify import TOP_K, Pending, Verdict, forward_tree, launch


def check_fits(prompt_len: int, max_new_tokens: int, max_positions: int) -> None:
    if prompt_len + max_new_tokens > max_positions:
        raise PromptError(
            f"prompt: {prompt_len} prompt tokens + max_new_tokens {max_new_tokens} exceed the "
            f"model's context of {max_positions} tokens; shorten the context or lower max_new_tokens")


def check_token_settings(config: Settings, vocab_size: int) -> None:
    """ConfigError for a token-id setting (kind "token_ids") holding an id the model lacks."""
    for info in describe(type(config)):
        if info.kind != "token_ids":
            continue
        bad = [t for t in getattr(config, info.name) if not 0 <= t < vocab_size]
        if bad:
            raise ConfigError(info.name, f"token id {bad[0]} is outside the model's vocabulary "
                                         f"(0..{vocab_size - 1})")


def _fit_tree(tree: DraftTree, max_depth: int) -> DraftTree:
    """Drop nodes deeper than max_depth (they could never be committed)."""
    if not tree.tokens or max(tree.depths) <= max_depth:
        return tree
    return tree.prune([i for i, d in enumerate(tree.depths) if d <= max_depth])


def _apply_stops(new: list[int], budget: int, lm: LoadedModel, stops: StopText | None
                 ) -> tuple[list[int], str | None]:
    """Cut the step's new tokens at the first EOS or stop string, or at the token budget.
    Token by token, so a step ends where plain decoding would have stopped. `stops` holds the
    output's text so far and sees each token once (linear in the output, token_pieces.StopText)."""
    for i, tok in enumerate(new):
        if tok in lm.eos_ids:
            return new[: i + 1], "eos"
        if stops is not None and stops.add(tok):
            return new[: i + 1], "stop_string"
    if len(new) >= budget:
        return new[:budget], "length"
    return new, None


def _first_forward(model: torch.nn.Module, cache: DynamicCache, buf: TreeBuffers, n_nodes: int) -> torch.Tensor:
    """The first verify forward, where a model that cannot take the engine's 4-D (tree)
    attention mask fails: say so, naming the model class, instead of a stack trace."""
    try:
        return forward_tree(model, cache, buf, n_nodes)                  # [N+1, V]
    except torch.OutOfMemoryError:
        raise
    except MASK_ERRORS as err:
        raise mask_refused(model, buf, err) from None


# what a model that cannot take the engine's 4-D mask raises at its first forward
MASK_ERRORS = (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError)


def mask_refused(model: torch.nn.Module, buf: TreeBuffers, err: Exception) -> ModelLoadError:
    """The one line for a model that rejected the 4-D (tree) attention mask (the solo loop's and
    the batched engine's first forward)."""
    first = (str(err).splitlines() or [""])[0][:200]
    return ModelLoadError(
        f"model: {type(model).__name__} rejected the 4-D attention mask (shape "
        f"{tuple(buf.attention_mask.shape)}) that specviz verifies draft trees with "
        f"({type(err).__name__}: {first}); use a model whose attention accepts a custom 4-D "
        "mask (Llama, Mistral, Qwen2, Gemma, GPT-2 and most decoder-only models in transformers)")


_NO_CAPTURE = nullcontext()


def _disabled(phase: str, err: Exception) -> dict[str, str]:
    """The step info's record of a drafter that raised and was turned off (Trace.drafter_disabled)."""
    return {"phase": phase, "error": f"{type(err).__name__}: {err}"}


@dataclass
class _Generation:
    """What one generation carries from step to step."""
    lm: LoadedModel
    drafter: Drafter
    name: str
    decoding: DecodingConfig
    recorder: Recorder
    timer: PhaseTimer
    cost: VerifyCost                   # this generation's copy: its running scale is its own
    tokens: list[int]                  # the committed sequence, prompt first
    prompt_len: int
    cache: AnyCache                    # a kvcache.StaticKV once _run leases one (LoadedModel.compile_step)
    needs: DrafterNeeds
    capture: HiddenCapture | None      # the target's hidden states, for a drafter that needs them
    stops: StopText | None             # the output's text so far, when there are stop strings
    top_k: int                         # the target's best tokens per row a drafter sees
    generator: torch.Generator | None = None   # sampling's, on the logits' device (made at the first forward)
    hidden: torch.Tensor | None = None         # [H]: the row that chose the root
    features: torch.Tensor | None = None       # [k, F]: the rows committed since the last step
    features_at: int = 0
    drafter_ok: bool = True
    step: int = 0

    @property
    def past_len(self) -> int:
        """Rows in the KV cache: every committed token but the root (the last one)."""
        return len(self.tokens) - 1

    @property
    def budget(self) -> int:
        """New tokens still wanted."""
        return self.decoding.max_new_tokens - (len(self.tokens) - self.prompt_len)

    def turn_off(self, where: str, err: Exception, info: dict[str, Any]) -> None:
        """The drafter raised: off for the rest of the generation, the step degrades to plain decoding."""
        self.drafter_ok = False
        call = "" if where == "propose" else " in observe"
        info["drafter_error"] = (f"drafter {self.name!r} failed{call} at step {self.step}: {type(err).__name__}: "
                                 f"{err} (turned off for the rest of the generation)")
        info["drafter_disabled"] = _disabled(where, err)


def _prefill(g: _Generation) -> None:
    """Everything but the last token (the root) into the KV cache, with the hidden states a drafter needs."""
    with g.timer("prefill"):
        if g.prompt_len > 1:
            with g.capture or _NO_CAPTURE:
                g.lm.model(input_ids=torch.tensor([g.tokens[:-1]], device=g.lm.device),
                           past_key_values=g.cache, use_cache=True)
            if g.capture is not None:
                g.hidden = g.capture.row(-1) if g.needs.hidden else None                # [H]: chose the root
                if g.needs.feature_layers:                                              # [prompt_len-1, F]
                    g.features = g.capture.rows(list(range(g.prompt_len - 1)))


def _draft(g: _Generation, ctx: DraftContext) -> DraftTree:
    """1. the drafter's tree (it charges draft.search / draft.tree itself), its ids checked."""
    if not g.drafter_ok:
        return DraftTree.empty()
    try:
        tree = g.drafter.propose(ctx)
        tree.check_vocab(g.lm.vocab_size)         # no out-of-vocabulary id reaches the forward
        return tree
    except Exception as err:  # noqa: BLE001 - any drafter bug must not kill the run
        g.turn_off("propose", err, ctx.info)
        return DraftTree.empty()


def _buffers(g: _Generation, tree: DraftTree, info: dict[str, Any]) -> tuple[DraftTree, TreeBuffers]:
    """2. the tree cut to what can still be committed, and its input rows, positions and mask
    (padded to the cheapest row count, cost.py): [1, R] ids, [1, R] positions, [1, 1, R, past + R] mask."""
    with g.timer("draft.tree"):
        tree = _fit_tree(tree, min(g.budget - 1, g.lm.max_positions - 1 - g.past_len))
        buf = build_buffers(tree, g.tokens[-1], g.past_len, g.lm.dtype, g.lm.device,
                            pad_to=g.cost.padded_len(len(tree) + 1))
        if buf.rows > len(tree) + 1:
            info["pad_rows"] = buf.rows - len(tree) - 1
    return tree, buf


def _forward_and_judge(g: _Generation, tree: DraftTree, buf: TreeBuffers) -> Verdict:
    """3. one target forward over root + tree -> logits [N+1, V]; 4. the acceptance judged on
    the logits' device and read back in the step's one transfer (verify.py). A timer that does not
    synchronise charges the wait for the forward's kernels (that transfer) to the forward on a GPU."""
    wait_in_forward = g.lm.device.type == "cuda" and not g.timer.synchronises
    pending: Pending | None = None
    start = g.timer.now()
    with g.timer("verify.forward"), g.capture or _NO_CAPTURE:
        logits = _first_forward(g.lm.model, g.cache, buf, len(tree)) if g.step == 0 \
            else forward_tree(g.lm.model, g.cache, buf, len(tree))                    # [N+1, V]
        if wait_in_forward:
            pending = _launch(g, tree, logits)
            pending.fetch()
    g.cost.observe(buf.rows, g.timer.now() - start)
    with g.timer("verify.accept"):
        return (pending or _launch(g, tree, logits)).verdict()


# The acceptance's random stream is the decoding seed's, but not the one a drafter seeds with the
# same number (the model drafters' ChainLoop draws its tokens from Generator().manual_seed(seed)):
# two generators seeded alike give the same bits, so the draft token and the uniform that judges
# it would be functions of one draw, not independent, and the committed token's distribution
# would lean (found by tests/test_model_drafters.py's chi-square test on seeds 0..999). The salt
# is 2^64 / the golden ratio, a common choice for decorrelating seeds; any fixed odd constant does.
ACCEPT_SEED_SALT = 0x9E3779B97F4A7C15


def acceptance_seed(seed: int) -> int:
    """The seed of the acceptance's generator for a decoding seed (distinct from the seed itself)."""
    return (seed ^ ACCEPT_SEED_SALT) % (1 << 63)


def _launch(g: _Generation, tree: DraftTree, logits: torch.Tensor) -> Pending:
    """verify.launch with this generation's sampling generator (made on the logits' device)."""
    if g.generator is None:
        g.generator = torch.Generator(device=logits.device).manual_seed(acceptance_seed(g.decoding.seed))
    return launch(tree, logits, g.decoding, g.generator, g.top_k, g.recorder)


def _commit(g: _Generation, acc: Acceptance) -> None:
    """5. keep the accepted path's KV rows; the hidden states of its rows for the drafter."""
    with g.timer("cache.commit"):
        commit(g.cache, g.past_len, acc.accepted)
    keep_hidden(g, acc, g.capture)


class RowReader(Protocol):
    """What `keep_hidden` reads a verify forward's hidden states from: a HiddenCapture (batch
    row 0), or the batched engine's view of one request's row."""
    def row(self, i: int) -> torch.Tensor | None: ...
    def rows(self, ids: list[int]) -> torch.Tensor | None: ...


def keep_hidden(g: _Generation, acc: Acceptance, capture: RowReader | None) -> None:
    """The hidden states of the step's committed rows, for a drafter that needs them (before
    g.tokens grows: features_at is the root's position)."""
    if capture is not None:                       # the row whose logits chose the bonus token
        g.hidden = capture.row(acc.accepted[-1] + 1 if acc.accepted else 0) if g.needs.hidden else None  # [H]
        if g.needs.feature_layers:                # the root's row and the accepted nodes' rows
            g.features = capture.rows([0, *(a + 1 for a in acc.accepted)])            # [1+k, F]
            g.features_at = g.past_len


def _observe(g: _Generation, tree: DraftTree, verdict: Verdict, new: tuple[int, ...], info: dict[str, Any]) -> None:
    """6. the drafter learns from the outcome."""
    if not g.drafter_ok:
        return
    with g.timer("draft.update"):
        try:
            g.drafter.observe(StepView(tree, verdict.acceptance.accepted, new, g.tokens,
                                       verdict.target_top, verdict.target_topk))
        except Exception as err:  # noqa: BLE001
            g.turn_off("observe", err, info)


def _run(g: _Generation) -> Iterator[StepRecord]:
    """The steps on this generation's KV cache: a static one (static_step.py) is leased when the
    first step is asked for and given back however the generation ends."""
    g.cache = generation_cache(g.lm.model, g.lm.compile_step, g.prompt_len + g.decoding.max_new_tokens,
                               g.lm.device, g.lm.dtype, hooks=g.capture is not None, context=g.lm.max_positions)
    try:
        yield from _steps(g)
    finally:
        release(g.cache)


def _steps(g: _Generation) -> Iterator[StepRecord]:
    memory = g.recorder.peak_memory(g.lm.device)   # reset here: the peak is this generation's
    clock = g.timer.now()
    with torch.inference_mode():
        _prefill(g)
    check_supported(g.cache)
    while True:
        # inference mode per step, never across the yield: it is per thread, and a consumer
        # (a web server) may resume this generator on another thread
        with torch.inference_mode():
            past_len, budget = g.past_len, g.budget
            ctx = DraftContext(g.tokens, g.prompt_len, g.step, budget, g.cost.predict, g.timer,
                               target_cache=CacheView(g.cache, past_len), hidden=g.hidden,
                               features=g.features, features_at=g.features_at,
                               keep_proposals=g.recorder.proposals)
            tree = _draft(g, ctx)                                    # 1
            tree, buf = _buffers(g, tree, ctx.info)                  # 2
            verdict = _forward_and_judge(g, tree, buf)               # 3, 4
            acc = verdict.acceptance
            _commit(g, acc)                                          # 5
            new, stop = _apply_stops([tree.tokens[i] for i in acc.accepted] + [acc.bonus], budget, g.lm, g.stops)
            g.tokens.extend(new)
            _observe(g, tree, verdict, tuple(new), ctx.info)         # 6
            record = g.recorder.step(                                # 7
                index=g.step, committed_len=past_len + 1, tree=tree, accepted=acc.accepted, bonus=acc.bonus,
                new_tokens=tuple(new), target_top=verdict.target_top,
                display=Display(verdict.target_prob, verdict.target_top_prob, verdict.target_top_logits),
                timings=g.timer.take(), wall=g.timer.now() - clock, info=ctx.info, stop=stop, memory=memory)
        yield record
        clock = g.timer.now()                     # time spent by the consumer is not ours
        if stop:
            return
        g.step += 1


def check_model(lm: object) -> None:
    """ModelLoadError unless `lm` is what load_model returns."""
    if not isinstance(lm, LoadedModel):
        raise ModelLoadError(f"lm: give the model that specviz.load_model(...) returns, not {type(lm).__name__}")


PromptLike = Prompt | str | Sequence[int]       # a built prompt, a message (chat template applied) or token ids
DecodingLike = DecodingConfig | Mapping[str, Any] | None


def as_prompt(lm: LoadedModel, prompt: PromptLike) -> Prompt:
    """A Prompt from what a caller passes: a Prompt as it is; text through build_prompt (the
    model's chat template, as the CLI and the explorer use); token ids as they are."""
    if isinstance(prompt, Prompt):
        return prompt
    if isinstance(prompt, str):
        return build_prompt(lm.tokenizer, prompt)
    ids = prompt_ids(lm, prompt)
    return Prompt(lm.tokenizer.decode(list(ids)) if lm.tokenizer is not None else "", ids, None)


def prompt_ids(lm: LoadedModel, prompt: PromptLike) -> tuple[int, ...]:
    """The token ids of what a caller passes (as_prompt), checked against the vocabulary."""
    if isinstance(prompt, (Prompt, str)):
        ids = as_prompt(lm, prompt).ids
    elif isinstance(prompt, (bytes, bytearray, memoryview)):      # would iterate as byte values
        raise PromptError("prompt: bytes; decode them to text first (e.g. prompt.decode('utf-8'))")
    else:
        try:
            ids = tuple(prompt)
        except TypeError:
            raise PromptError(f"prompt: give text, token ids or a Prompt (specviz.build_prompt), not "
                              f"{type(prompt).__name__}") from None
        if any(isinstance(t, bool) or not isinstance(t, int) for t in ids):
            raise PromptError("prompt: token ids must be whole numbers")
    check_ids(ids, lm.vocab_size)
    return tuple(ids)


def check_ids(ids: Sequence[int], vocab_size: int) -> None:
    """PromptError for a token id outside the model's vocabulary."""
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise PromptError(f"prompt: token id {bad} is outside the model's vocabulary (0..{vocab_size - 1})")


def as_decoding(decoding: DecodingLike) -> DecodingConfig:
    """A DecodingConfig from None (the defaults), a DecodingConfig or a mapping of its fields
    (checked as the CLI's flags are)."""
    if decoding is None:
        return DecodingConfig()
    if isinstance(decoding, DecodingConfig):
        return decoding
    if isinstance(decoding, Mapping):
        return build(DecodingConfig, dict(decoding))
    raise ConfigError("decoding", f"give a DecodingConfig or a dict of its fields, not {type(decoding).__name__}")


DrafterLike = str | DrafterSpec | DrafterPlan   # a name or choice text, a spec (a bench peer's) or a resolved plan
ConfigLike = Mapping[str, Any] | Settings | None   # settings on top, or the drafter's config itself


def generate_steps(lm: LoadedModel, prompt: PromptLike, drafter: DrafterLike = "vanilla",
                   drafter_config: ConfigLike = None, decoding: DecodingLike = None,
                   store: DrafterStore | None = None, recorder: str | Recorder = DEFAULT_RECORDER
                   ) -> Iterator[StepRecord]:
    """Validate everything now (raising SpecvizError), then return the step iterator.
    `drafter` and `drafter_config` are resolved by drafters.kit.choice.plan_of (the one resolver).
    `store` (drafters.kit.store.DrafterStore, owned by the caller's session) holds what a drafter
    keeps across generations; None: the drafter starts fresh. `recorder`: what each step keeps
    beyond its text (record.py: teach, bench, off)."""
    return _run(new_generation(lm, prompt, drafter, drafter_config, decoding, store, recorder))


def new_generation(lm: LoadedModel, prompt: PromptLike, drafter: DrafterLike = "vanilla",
                   drafter_config: ConfigLike = None, decoding: DecodingLike = None,
                   store: DrafterStore | None = None, recorder: str | Recorder = DEFAULT_RECORDER
                   ) -> _Generation:
    """One generation's state, validated (SpecvizError) and not started: its drafter made, its
    cache empty (generate_steps runs it; the batched engine, batch.py, runs several together)."""
    check_model(lm)
    decoding = as_decoding(decoding)
    chosen = plan_of(drafter, drafter_config)
    keeps = recorder_named(recorder)
    ids = prompt_ids(lm, prompt)
    if not ids:
        raise PromptError("prompt: no tokens to start from")
    check_fits(len(ids), decoding.max_new_tokens, lm.max_positions)
    check_token_settings(chosen.config, lm.vocab_size)
    setup = DraftSetup(ids, lm.vocab_size, lm.eos_ids, decoding.max_new_tokens, lm, decoding, store)
    cost = lm.cost_model()     # the target's cost model is timed (or read from disk) now, not in step 0
    drafter_obj = chosen.spec.make(chosen.config, setup)
    # what the drafter declared it needs (DrafterNeeds): the target's final hidden state of the
    # row that chose the root, or feature rows (hidden.py); a drafter that needs neither pays nothing
    needs = needs_of(drafter_obj)
    g = _Generation(
        lm=lm, drafter=drafter_obj, name=chosen.spec.name, decoding=decoding, recorder=keeps,
        timer=keeps.timer(lm.device), cost=cost.copy(), tokens=list(ids), prompt_len=len(ids),
        cache=new_cache(lm.model.config), needs=needs,
        capture=HiddenCapture(lm.model, needs.feature_layers) if needs.capture else None,
        stops=StopText(lm.tokenizer, decoding.stop) if decoding.stop else None,
        # a drafter that recycles the verifier's candidates may ask for more than verify.TOP_K
        top_k=max(TOP_K, needs.target_topk))
    return g


def build_trace(lm: LoadedModel, prompt: Prompt, drafter: DrafterLike, drafter_config: ConfigLike,
                decoding: DecodingConfig, steps: Sequence[StepRecord],
                recorder: str | Recorder = DEFAULT_RECORDER) -> Trace:
    chosen = plan_of(drafter, drafter_config)
    output = tuple(t for s in steps for t in s.new_tokens)
    ids = set(prompt.ids) | set(output)
    for s in steps:
        ids.update(s.token_ids)                    # the trees (the whole proposals too) and the target's choices
        ids.update(s.target_top)
    output_pieces = incremental_pieces(lm.tokenizer, output)           # joins to the output text
    errors = tuple(s.info["drafter_error"] for s in steps if "drafter_error" in s.info)
    disabled = next(({"step": s.index, **s.info["drafter_disabled"]} for s in steps
                     if "drafter_disabled" in s.info), None)
    cost = lm.cost_model()
    return Trace(
        model_id=lm.model_id, drafter=chosen.spec.name, drafter_config=to_dict(chosen.config),
        decoding=to_dict(decoding), prompt_text=prompt.text, prompt_ids=tuple(prompt.ids),
        steps=tuple(steps), output_ids=output,
        output_text="".join(output_pieces), output_pieces=tuple(output_pieces),
        prompt_pieces=tuple(incremental_pieces(lm.tokenizer, prompt.ids, skip_special_tokens=False)),
        token_text=token_labels(lm.tokenizer, ids), totals=Totals.of(list(steps)),
        stop_reason=(steps[-1].stop or "stopped") if steps else "stopped",
        device=str(lm.device), dtype=str(lm.dtype).replace("torch.", ""), errors=errors,
        context_char_span=prompt.context_char_span,
        verify_ratio=cost.plain_steps([len(s.tree) for s in steps]), runtime=lm.runtime,
        confidence=chosen.spec.confidence,
        peak_memory_mb=max((s.peak_memory_mb for s in steps if s.peak_memory_mb is not None), default=None),
        drafter_disabled=disabled, recorder=recorder_named(recorder).name, cost_curve=cost.described())


def generate(lm: LoadedModel, prompt: PromptLike, drafter: DrafterLike = "vanilla",
             drafter_config: ConfigLike = None, decoding: DecodingLike = None,
             store: DrafterStore | None = None, recorder: str | Recorder = DEFAULT_RECORDER) -> Trace:
    """One whole generation as a Trace; `prompt` and `decoding` as generate_steps takes them."""
    check_model(lm)
    decoding, prompt = as_decoding(decoding), as_prompt(lm, prompt)
    chosen = plan_of(drafter, drafter_config)                  # resolved once, for the steps and the trace
    steps = list(generate_steps(lm, prompt, chosen, None, decoding, store, recorder))
    return build_trace(lm, prompt, chosen, None, decoding, steps, recorder)
