"""The engine: one loop for every drafter, yielding a StepRecord per speculative step.

    generate_steps(lm, prompt, "ngram_trie", {...}, DecodingConfig())  -> Iterator[StepRecord]
    generate(lm, prompt, "ngram_trie", {...}, DecodingConfig())        -> Trace

`drafter` is a registered drafter's name, a choice as the CLI writes it (`ngram_trie@paper`,
`ngram_trie[n=8]`), or a DrafterSpec the registry does not list (the authors' code as a bench
peer, specviz/peers/).

Each step: 1 draft -> 2 build mask and positions -> 3 one target forward over the tree ->
4 accept the longest valid path plus a bonus token -> 5 commit the accepted KV rows ->
6 the drafter observes -> 7 record. A drafter that raises, or proposes a token id outside the
vocabulary, is switched off for the rest of the generation (the step degrades to plain
decoding) and the error is recorded; the text generated so far is never lost. Settings that
hold token ids (kind "token_ids") are checked against the vocabulary before the run starts.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Iterator, Mapping, Sequence

import torch
from transformers import DynamicCache

from .. import drafters as _drafters  # noqa: F401  (registers the built-in drafters)
from ..core.decoding import DecodingConfig
from ..drafters.kit.base import DraftContext, Drafter, DrafterSpec, DraftSetup, StepView, get, needs_of
from ..drafters.kit.choice import parse_choice
from ..errors import ConfigError, ModelLoadError, PromptError
from ..models.hidden import HiddenCapture
from ..models.kvcache import CacheView, check_supported, commit, new_cache
from ..models.loading import LoadedModel
from ..models.prompts import Prompt, build_prompt
from ..core.settings import build, describe, to_dict
from ..core.timing import PeakMemory, PhaseTimer
from ..models.token_pieces import StopText, incremental_pieces, token_labels
from ..core.trace import StepRecord, Totals, Trace
from ..core.tree import DraftTree, build_buffers
from .verify import TOP_K, forward_tree, judge


def check_fits(prompt_len: int, max_new_tokens: int, max_positions: int) -> None:
    if prompt_len + max_new_tokens > max_positions:
        raise PromptError(
            f"prompt: {prompt_len} prompt tokens + max_new_tokens {max_new_tokens} exceed the "
            f"model's context of {max_positions} tokens; shorten the context or lower max_new_tokens")


def check_token_settings(config: Any, vocab_size: int) -> None:
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


def _first_forward(model: Any, cache: DynamicCache, buf: Any, n_nodes: int) -> torch.Tensor:
    """The first verify forward, where a model that cannot take the engine's 4-D (tree)
    attention mask fails: say so, naming the model class, instead of a stack trace."""
    try:
        return forward_tree(model, cache, buf, n_nodes)                  # [N+1, V]
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError) as err:
        first = (str(err).splitlines() or [""])[0][:200]
        raise ModelLoadError(
            f"model: {type(model).__name__} rejected the 4-D attention mask (shape "
            f"{tuple(buf.attention_mask.shape)}) that specviz verifies draft trees with "
            f"({type(err).__name__}: {first}); use a model whose attention accepts a custom 4-D "
            "mask (Llama, Mistral, Qwen2, Gemma, GPT-2 and most decoder-only models in transformers)") from None


_NO_CAPTURE = nullcontext()


def _disabled(phase: str, err: Exception) -> dict[str, str]:
    """The step info's record of a drafter that raised and was turned off (Trace.drafter_disabled)."""
    return {"phase": phase, "error": f"{type(err).__name__}: {err}"}


def _run(lm: LoadedModel, prompt_ids: tuple[int, ...], drafter: Drafter, name: str,
         decoding: DecodingConfig) -> Iterator[StepRecord]:
    model, timer = lm.model, PhaseTimer(lm.device)
    cost = lm.cost_model().copy()                  # per-generation copy: no state shared by users
    generator = torch.Generator().manual_seed(decoding.seed)
    tokens = list(prompt_ids)
    prompt_len = len(tokens)
    cache = new_cache(model.config)
    memory = PeakMemory(lm.device)                # reset here: the peak is this generation's
    # what the drafter declared it needs (DrafterNeeds): the target's final hidden state of the
    # row that chose the root, or feature rows (hidden.py); a drafter that needs neither pays nothing
    needs = needs_of(drafter)
    feature_layers = needs.feature_layers
    capture = HiddenCapture(model, feature_layers) if needs.capture else None
    hidden = features = None                       # features: the committed rows' (hidden.py)
    features_at = 0
    clock = timer.now()
    with torch.inference_mode():
        with timer("prefill"):                    # everything but the last token, which is the root
            if prompt_len > 1:
                with capture or _NO_CAPTURE:
                    model(input_ids=torch.tensor([tokens[:-1]], device=lm.device),
                          past_key_values=cache, use_cache=True)
                hidden = capture.row(-1) if capture and needs.hidden else None     # [H]: chose the root
                if feature_layers and capture is not None:             # [prompt_len-1, F]
                    features = capture.rows(list(range(prompt_len - 1)))
    check_supported(cache)
    drafter_ok, step = True, 0
    stops = StopText(lm.tokenizer, decoding.stop) if decoding.stop else None     # the output's text
    # a drafter that recycles the verifier's candidates may ask for more than verify.TOP_K
    top_k = max(TOP_K, needs.target_topk)
    while True:
        # inference mode per step, never across the yield: it is per thread, and a consumer
        # (a web server) may resume this generator on another thread
        with torch.inference_mode():
            past_len, budget = len(tokens) - 1, decoding.max_new_tokens - (len(tokens) - prompt_len)
            # 1. draft (the drafter charges draft.search / draft.tree itself)
            ctx = DraftContext(tokens, prompt_len, step, budget, cost.predict, timer,
                               target_cache=CacheView(cache, past_len), hidden=hidden,
                               features=features, features_at=features_at)
            tree = DraftTree.empty()
            if drafter_ok:
                try:
                    tree = drafter.propose(ctx)
                    tree.check_vocab(lm.vocab_size)   # no out-of-vocabulary id reaches the forward
                except Exception as err:  # noqa: BLE001 - any drafter bug must not kill the run
                    tree = DraftTree.empty()
                    drafter_ok = False
                    ctx.info["drafter_error"] = (f"drafter {name!r} failed at step {step}: {type(err).__name__}: {err} "
                                                 "(turned off for the rest of the generation)")
                    ctx.info["drafter_disabled"] = _disabled("propose", err)
            # 2. mask and positions
            with timer("draft.tree"):
                tree = _fit_tree(tree, min(budget - 1, lm.max_positions - 1 - past_len))
                buf = build_buffers(tree, tokens[-1], past_len, lm.dtype, lm.device,
                                    pad_to=cost.padded_len(len(tree) + 1))
                if buf.rows > len(tree) + 1:
                    ctx.info["pad_rows"] = buf.rows - len(tree) - 1
            # 3. one target forward over root + tree
            start = timer.now()
            with timer("verify.forward"), capture or _NO_CAPTURE:
                logits = _first_forward(model, cache, buf, len(tree)) if step == 0 \
                    else forward_tree(model, cache, buf, len(tree))      # [N+1, V]
            cost.observe(buf.rows, timer.now() - start)
            # 4. accept the longest valid path, plus the target's bonus token
            with timer("verify.accept"):
                verdict = judge(tree, logits, decoding, generator, top_k)
                acc = verdict.acceptance
            # 5. commit the accepted rows of the KV cache
            with timer("cache.commit"):
                commit(cache, past_len, acc.accepted)
            if capture is not None:               # the row whose logits chose the bonus token
                hidden = capture.row(acc.accepted[-1] + 1 if acc.accepted else 0) if needs.hidden else None  # [H]
                if feature_layers:                 # the root's row and the accepted nodes' rows
                    features = capture.rows([0, *(a + 1 for a in acc.accepted)])     # [1+k, F]
                    features_at = past_len
            new, stop = _apply_stops([tree.tokens[i] for i in acc.accepted] + [acc.bonus], budget, lm, stops)
            tokens.extend(new)
            # 6. the drafter learns from the outcome
            if drafter_ok:
                with timer("draft.update"):
                    try:
                        drafter.observe(StepView(tree, acc.accepted, tuple(new), tokens,
                                                 verdict.target_top, verdict.target_topk))
                    except Exception as err:  # noqa: BLE001
                        drafter_ok = False
                        ctx.info["drafter_error"] = (f"drafter {name!r} failed in observe at step {step}: "
                                                     f"{type(err).__name__}: {err} (turned off for the rest "
                                                     "of the generation)")
                        ctx.info["drafter_disabled"] = _disabled("observe", err)
            # 7. record
            now = timer.now()
            rows = [0, *(a + 1 for a in acc.accepted)]  # the logits row that chose each new token
            record = StepRecord(
                index=step, committed_len=past_len + 1, tree=tree, accepted=acc.accepted, bonus=acc.bonus,
                new_tokens=tuple(new), target_top=verdict.target_top, target_prob=verdict.target_prob,
                timings=timer.take(), wall=now - clock, info=ctx.info, stop=stop,
                top_logits=tuple(verdict.target_top_logits[r] for r in rows[:len(new)]),
                peak_memory_mb=memory.peak_mb(), target_top_prob=verdict.target_top_prob)
        yield record
        clock = timer.now()                       # time spent by the consumer is not ours
        if stop:
            return
        step += 1


def _spec(drafter: str | DrafterSpec) -> DrafterSpec:
    """A registered drafter's spec by name, or a spec given as is (a bench peer's, specviz.peers:
    the same loop, with a drafter the registry does not list)."""
    return drafter if isinstance(drafter, DrafterSpec) else get(drafter)


def drafter_and_config(drafter: str | DrafterSpec, drafter_config: Mapping[str, Any] | Any) -> tuple[DrafterSpec, Any]:
    """The spec and the validated config of what a caller passes: a name, or a choice as the CLI
    writes it (`ngram_trie@paper[num_draft=16]`, choice.py), with a dict of settings on top (one
    that contradicts the brackets is refused), or the drafter's config itself. The choice's own
    parser and merge (choice.py, as service.plan uses them; service sits above this module), then
    one validation of the merged values."""
    if isinstance(drafter, str) and ("@" in drafter or "[" in drafter):
        choice = parse_choice(drafter, validate=False)
        if drafter_config is not None and not isinstance(drafter_config, Mapping):
            raise ConfigError("drafter_config", f"with a choice like {drafter!r}, give a dict of settings, "
                                                f"not {type(drafter_config).__name__}")
        return choice.spec, choice.spec.config(choice.values(dict(drafter_config or {}), source="drafter_config"))
    spec = _spec(drafter)
    return spec, drafter_config if isinstance(drafter_config, spec.config_cls) else spec.config(drafter_config)


def check_model(lm: Any) -> None:
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


def generate_steps(lm: LoadedModel, prompt: PromptLike, drafter: str | DrafterSpec = "vanilla",
                   drafter_config: Mapping[str, Any] | Any = None,
                   decoding: DecodingLike = None, store: Any = None) -> Iterator[StepRecord]:
    """Validate everything now (raising SpecvizError), then return the step iterator.
    `store` (drafters.store.DrafterStore, owned by the caller's session) holds what a drafter
    keeps across generations; None: the drafter starts fresh."""
    check_model(lm)
    decoding = as_decoding(decoding)
    spec, config = drafter_and_config(drafter, drafter_config)
    ids = prompt_ids(lm, prompt)
    if not ids:
        raise PromptError("prompt: no tokens to start from")
    check_fits(len(ids), decoding.max_new_tokens, lm.max_positions)
    check_token_settings(config, lm.vocab_size)
    setup = DraftSetup(ids, lm.vocab_size, lm.eos_ids, decoding.max_new_tokens, lm, decoding, store)
    lm.cost_model()            # the target's cost model is timed now (once per model), not in step 0
    return _run(lm, ids, spec.make(config, setup), spec.name, decoding)


def build_trace(lm: LoadedModel, prompt: Prompt, drafter: str | DrafterSpec,
                drafter_config: Mapping[str, Any] | Any,
                decoding: DecodingConfig, steps: Sequence[StepRecord]) -> Trace:
    spec, config = drafter_and_config(drafter, drafter_config)
    output = tuple(t for s in steps for t in s.new_tokens)
    ids = set(prompt.ids) | set(output)
    for s in steps:
        ids.update(s.token_ids)                    # the trees (the whole proposals too) and the target's choices
        ids.update(s.target_top)
    output_pieces = incremental_pieces(lm.tokenizer, output)           # joins to the output text
    errors = tuple(s.info["drafter_error"] for s in steps if "drafter_error" in s.info)
    disabled = next(({"step": s.index, **s.info["drafter_disabled"]} for s in steps
                     if "drafter_disabled" in s.info), None)
    verify_ratio = lm.cost_model().plain_steps([len(s.tree) for s in steps])
    return Trace(
        model_id=lm.model_id, drafter=spec.name, drafter_config=to_dict(config),
        decoding=to_dict(decoding), prompt_text=prompt.text, prompt_ids=tuple(prompt.ids),
        steps=tuple(steps), output_ids=output,
        output_text="".join(output_pieces), output_pieces=tuple(output_pieces),
        prompt_pieces=tuple(incremental_pieces(lm.tokenizer, prompt.ids, skip_special_tokens=False)),
        token_text=token_labels(lm.tokenizer, ids), totals=Totals.of(list(steps)),
        stop_reason=(steps[-1].stop or "stopped") if steps else "stopped",
        device=str(lm.device), dtype=str(lm.dtype).replace("torch.", ""), errors=errors,
        context_char_span=prompt.context_char_span, verify_ratio=verify_ratio, runtime=lm.runtime,
        confidence=spec.confidence,
        peak_memory_mb=max((s.peak_memory_mb for s in steps if s.peak_memory_mb is not None), default=None),
        drafter_disabled=disabled)


def generate(lm: LoadedModel, prompt: PromptLike, drafter: str | DrafterSpec = "vanilla",
             drafter_config: Mapping[str, Any] | Any = None,
             decoding: DecodingLike = None, store: Any = None) -> Trace:
    """One whole generation as a Trace; `prompt` and `decoding` as generate_steps takes them."""
    check_model(lm)
    decoding, prompt = as_decoding(decoding), as_prompt(lm, prompt)
    steps = list(generate_steps(lm, prompt, drafter, drafter_config, decoding, store))
    return build_trace(lm, prompt, drafter, drafter_config, decoding, steps)

