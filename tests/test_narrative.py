"""viz/narrative.py: "what happened at this step" told from real traces of the tiny random
model, one drafter family at a time (context: ngram_trie, prompt_lookup; corpus: rest,
hierarchy over an index built from the model's own outputs; model: draft_model), checked
against the step's own record: the matched suffix, where it was found, the cost model's
numbers, the first rejected node with the target's choice and its probability, the bonus
token and the passes saved."""
from __future__ import annotations

import random

import numpy as np
import pytest

from conftest import run_ids
from specviz import build_prompt, generate
from specviz.core.decoding import DecodingConfig
from specviz.index.store import build_corpus_parts
from specviz.index.suffix_array import SEP
from specviz.models import LoadedModel
from specviz.core.trace import Trace
from specviz.viz.markup import md_text
from specviz.viz.narrative import narrative_facts, step_narrative
from specviz.viz.tree import node_status

CONTEXT = ("the red fox jumps over the lazy dog. the red fox runs past the old barn. "
           "the red hen sits on the lazy dog. the old barn is red. ") * 2
DECODING = DecodingConfig(max_new_tokens=24)


def _run(lm: LoadedModel, drafter: str, config: dict) -> Trace:
    prompt = build_prompt(lm.tokenizer, "Once more: the red fox", context=CONTEXT, chat=False)
    return generate(lm, prompt, drafter, config, DECODING)


def _text(trace: Trace, ids) -> str:
    """The tokens' text as the narrative's Markdown quotes it (shown as written: viz/markup.py)."""
    return md_text("".join(trace.token_text[t] for t in ids).replace("\n", " ⏎ "))


def _check_common(trace: Trace) -> None:
    """What every step's story must say, whatever the drafter."""
    for k, s in enumerate(trace.steps):
        text = step_narrative(trace, k)
        assert text.startswith(f"### What happened at step {k}")
        assert f"saved **{len(s.new_tokens) - 1} pass" in text
        assert narrative_facts(trace, k)["saved"] == len(s.new_tokens) - 1
        if len(s.new_tokens) > len(s.accepted):
            assert f"The bonus token “{_text(trace, [s.bonus])}”" in text
        if len(s.tree):
            assert f"accepted **{len(s.accepted)}**" in text or (not s.accepted and "accepted **none**" in text)


def _check_first_rejected(trace: Trace) -> int:
    """Steps whose first rejected node is named with the target's choice and its probability."""
    told = 0
    for k, s in enumerate(trace.steps):
        facts = narrative_facts(trace, k)
        if facts["first_rejected"] is None:
            continue
        node = facts["first_rejected"]
        assert node_status(s)[node] == "rejected"
        assert s.tree.parents[node] == (s.accepted[-1] if s.accepted else -1)
        row = s.tree.parents[node] + 1
        assert facts["target_choice"] == s.target_top[row] == s.bonus        # greedy: the bonus is its choice
        assert 0 < facts["target_choice_prob"] <= 1
        text = step_narrative(trace, k)
        assert (f"the target's own choice there was “{_text(trace, [s.bonus])}” with probability "
                f"{s.target_top_prob[row]:.1%}") in text
        assert f"offered “{_text(trace, [s.tree.tokens[node]])}”" in text
        told += 1
    return told


@pytest.mark.parametrize("size_by_cost", [False, True])
def test_ngram_trie_tells_the_match_its_place_and_the_sizing(tiny_lm_tok: LoadedModel, size_by_cost: bool) -> None:
    trace = _run(tiny_lm_tok, "ngram_trie", {"size_by_cost": size_by_cost, "num_draft": 12, "explore_every": 1})
    _check_common(trace)
    committed = (*trace.prompt_ids, *trace.output_ids)
    # steps where the trie matched (the cost model may then cut the tree to nothing)
    matched = [k for k, s in enumerate(trace.steps) if "match_len" in s.info]
    assert matched, "the trie never matched: the test proves little"
    for k in matched:
        s, text = trace.steps[k], step_narrative(trace, k)
        m = s.info["match_len"]
        suffix = _text(trace, committed[s.committed_len - m: s.committed_len])
        assert f"of the text, “{suffix[:40]}" in text and "matched earlier text" in text
        if size_by_cost and len(s.tree):
            assert f"at {s.info['predicted_ms']:.0f} ms, against {s.info['plain_ms']:.0f} ms" in text
            assert f"expected {s.info['expected_tokens']:.2f} tokens" in text
        elif size_by_cost:
            assert "cut the tree to nothing" in text and f"a plain step costs {s.info['plain_ms']:.0f} ms" in text
        else:
            assert "Sizing by cost is off in this run" in text and "num_draft = 12" in text
    if not size_by_cost:
        # the first draft came from the context (the prompt ends with a phrase of it)
        assert "found in your context, at characters" in step_narrative(trace, matched[0])
        assert _check_first_rejected(trace) > 0


def test_prompt_lookup_tells_the_match(tiny_lm_tok: LoadedModel) -> None:
    trace = _run(tiny_lm_tok, "prompt_lookup", {"max_ngram": 3, "num_tokens": 6})
    _check_common(trace)
    assert _check_first_rejected(trace) > 0
    k = next(k for k, s in enumerate(trace.steps) if len(s.tree))
    assert "matched earlier text. It was found in" in step_narrative(trace, k)


@pytest.fixture(scope="module")
def tok_index(tiny_lm_tok: LoadedModel, tmp_path_factory) -> str:
    """A suffix index over the tiny model's own greedy continuations (its tokenizer's ids),
    the continuation of the corpus drafters' prompt among them, so their drafts get accepted."""
    rng = random.Random(3)
    ids = list(_corpus_prompt(tiny_lm_tok).ids)
    out, _ = run_ids(tiny_lm_tok, ids, max_new_tokens=24)
    docs = [ids[-12:] + out[:12]]
    for _ in range(8):
        prompt = [rng.randrange(10, 500) for _ in range(6)]
        out, _ = run_ids(tiny_lm_tok, prompt, max_new_tokens=40)
        docs.append(prompt + out)
    toks = np.asarray([t for doc in docs for t in doc + [SEP]], dtype=np.int32)
    folder = tmp_path_factory.mktemp("tok-index")
    build_corpus_parts(folder, ("suffix",), tiny_lm_tok.tokenizer, tiny_lm_tok.vocab_size, tokens=toks)
    return str(folder)


def _corpus_prompt(lm: LoadedModel):
    return build_prompt(lm.tokenizer, "Go on.", context=CONTEXT, chat=False)


def _corpus_trace(lm: LoadedModel, drafter: str, config: dict) -> Trace:
    return generate(lm, _corpus_prompt(lm), drafter, config, DecodingConfig(max_new_tokens=24))


def test_rest_tells_the_corpus_match_and_the_cost_model(tiny_lm_tok: LoadedModel, tok_index: str) -> None:
    trace = _corpus_trace(tiny_lm_tok, "rest", {"corpus_index": tok_index, "size_by_cost": True, "explore_every": 1})
    _check_common(trace)
    committed = (*trace.prompt_ids, *trace.output_ids)
    matched = [k for k, s in enumerate(trace.steps) if s.info.get("match_len")]
    assert matched, "no corpus match: the test proves little"
    sized = 0
    for k in matched:
        s, text = trace.steps[k], step_narrative(trace, k)
        m = s.info["match_len"]
        assert f"“{_text(trace, committed[s.committed_len - m: s.committed_len])[:40]}" in text   # quotes are clipped
        assert f"occur {s.info['matches']} time" in text and "in the corpus index" in text
        assert f"found {s.info['candidates']} candidate" in text
        if not s.info["candidates"]:
            continue
        # the tree cutter records the cost model's numbers (tree_cutter.TreeCutter)
        assert {"expected_tokens", "predicted_ms", "plain_ms"} <= set(s.info)
        assert f"{s.info['plain_ms']:.0f} ms" in text
        sized += 1
        if not len(s.tree):
            assert "cut the tree to nothing" in text
    assert sized, "no candidates from the corpus: the test proves little"
    # the corpus holds the model's own continuation: every draft node is accepted, and no step
    # tells a rejection (the first-rejection story is checked on the ngram_trie, prompt_lookup
    # and hierarchy traces)
    assert all(narrative_facts(trace, k)["first_rejected"] is None for k in range(len(trace.steps)))
    assert not any("the target's own choice there was" in step_narrative(trace, k) for k in range(len(trace.steps)))


def test_hierarchy_tells_which_database_gave_what(tiny_lm_tok: LoadedModel, tok_index: str) -> None:
    trace = _corpus_trace(tiny_lm_tok, "hierarchy", {"corpus_index": tok_index, "size_by_cost": False})
    _check_common(trace)
    for k, s in enumerate(trace.steps):
        hits = s.info["db_hits"]
        text = step_narrative(trace, k)
        assert (f"the context DB gave {hits['context']} candidate" in text
                and f"the model DB {hits['model-db']}, the corpus {hits['corpus']}" in text)
        committed = (*trace.prompt_ids, *trace.output_ids)
        assert f"keyed by the last token “{_text(trace, committed[s.committed_len - 1: s.committed_len])}”" in text
    assert _check_first_rejected(trace) > 0


def test_draft_model_tells_the_draft_models_passes(tiny_lm_tok: LoadedModel) -> None:
    trace = _run(tiny_lm_tok, "draft_model", {"model": "tiny-random", "gamma": 3})
    _check_common(trace)
    for k, s in enumerate(trace.steps):
        if not len(s.tree):
            continue
        text = step_narrative(trace, k)
        n = s.info["draft_forwards"]
        assert "The draft model <code>tiny-random</code> predicted the draft" in text
        assert f"it ran {n} forward pass" in text and "chain of 3 tokens" in text
        assert "The chain length is gamma = 3" in text
        assert len(s.accepted) == len(s.tree)                    # the same model: all accepted
        assert "nothing after it was rejected" in text


def test_a_trace_without_the_targets_probabilities_still_tells_its_choice(tiny_lm_tok: LoadedModel) -> None:
    trace = _run(tiny_lm_tok, "ngram_trie", {"size_by_cost": False, "num_draft": 12})
    d = trace.to_dict()
    for s in d["steps"]:
        del s["target_top_prob"]                                  # as recorded before the field existed
    old = Trace.from_dict(d)
    k = next(k for k in range(len(old.steps)) if narrative_facts(old, k)["first_rejected"] is not None)
    text = step_narrative(old, k)
    assert "the target's own choice there was" in text and "with probability" not in text
    assert narrative_facts(old, k)["target_choice_prob"] is None
