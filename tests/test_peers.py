"""The authors' code as bench peers (specviz/peers/): refused with how to build it where its package
is missing; where it is installed (built as benchmarks/README.md says; never a requirement), it
drafts in specviz's engine loop, its greedy output equals vanilla's, and arctic_suffix drafts
what specviz's suffix_decoding drafts with the same settings."""
from __future__ import annotations

import random

import numpy as np
import pytest

from conftest import bench_one_question, model_documents, run_ids
from specviz.bench.methods import MethodError, parse_methods
from specviz.core.decoding import DecodingConfig
from specviz.drafters import REGISTRY
from specviz.drafters.kit.choice import parse_choice
from specviz.drafters.kit.store import DrafterStore
from specviz.engine import generate_steps
from specviz.index.store import build_corpus_parts
from specviz.index.suffix_array import SEP
from specviz.peers import ENGINE_PEERS, EnginePeer, PeerUnavailable


def _steps(lm, prompt, drafter, config, store, new=40):  # noqa: ANN001, ANN202
    steps = list(generate_steps(lm, list(prompt), drafter, config, DecodingConfig(max_new_tokens=new), store))
    return [t for s in steps for t in s.new_tokens], steps


def test_engine_peers_are_not_listed_as_drafters_and_name_a_valid_counterpart():
    for name, peer in ENGINE_PEERS.items():
        assert name not in REGISTRY                       # the explorer and `specviz drafters` never list it
        choice = parse_choice(peer.counterpart)           # the row to run beside it is a valid label
        assert choice.name in REGISTRY
        choice.config()


@pytest.mark.parametrize("name", sorted(ENGINE_PEERS))
def test_a_missing_peer_is_refused_with_how_to_build_it(name, monkeypatch):
    monkeypatch.setattr(EnginePeer, "available", lambda self: False)
    with pytest.raises(MethodError) as err:
        parse_methods("", name)
    peer = ENGINE_PEERS[name]
    assert f"needs {peer.distribution}, built as benchmarks/README.md says" in str(err.value)
    with pytest.raises(PeerUnavailable):
        peer.spec()


def test_peers_parse_as_engine_peers_where_installed():
    present = [n for n, p in ENGINE_PEERS.items() if p.available()]
    if not present:
        pytest.skip("no engine peer's package is installed here")
    methods, _ = parse_methods("", ",".join(present) + ",hf_greedy")
    assert [(m.label, m.kind) for m in methods[1:]] == [(n, "engine_peer") for n in present] + [("hf_greedy", "peer")]


# ---- arctic_suffix ---------------------------------------------------------------------------

def _outline(step):  # noqa: ANN001, ANN202
    """What a step drafted, but the tokens: match length (where it drafted), score, size, accepted."""
    drafted = len(step.tree) > 0
    return step.info["match_len"] if drafted else None, step.info.get("score", 0.0), len(step.tree), step.accepted_len


def test_arctic_suffix_drafts_what_suffix_decoding_drafts(tiny_lm):
    """Same settings (vLLM's), one store each carried across six generations (the global tree of
    responses): every step matches the same suffix length with the same score, so the same mean
    accepted; the drafted token differs only where two continuations have the same count (a tie:
    4 of about 300 steps here, each then accepted alike), and every output is vanilla's."""
    pytest.importorskip("arctic_inference.suffix_decoding")
    peer = ENGINE_PEERS["arctic_suffix"]
    ours = parse_choice(peer.counterpart)
    theirs_store, our_store = DrafterStore(), DrafterStore()
    steps_total = drafted = ties = 0
    for seed in range(6):
        rng = random.Random(seed)
        prompt = [rng.randrange(64) for _ in range(8)] * 3 + [rng.randrange(64) for _ in range(5)]
        vanilla, _ = run_ids(tiny_lm, prompt, max_new_tokens=48)
        out, theirs = _steps(tiny_lm, prompt, peer.spec(), None, theirs_store, 48)
        mine_out, mine = _steps(tiny_lm, prompt, ours.name, ours.values(), our_store, 48)
        assert out == vanilla and mine_out == vanilla, seed
        assert [_outline(s) for s in theirs] == [_outline(s) for s in mine], seed
        for a, b in zip(theirs, mine):
            if a.tree.tokens != b.tree.tokens:
                ties += 1
                assert a.tree.scores == b.tree.scores            # the same probabilities: a count tie
        steps_total += len(theirs)
        drafted += sum(len(s.tree) > 0 for s in theirs)
    assert drafted > steps_total // 3                   # the comparison covers real drafts
    assert ties <= steps_total // 20
    assert len(theirs_store) == 1                        # one cache for the session, as vLLM keeps one
    cache, _ = next(iter(theirs_store._items.values()))
    assert not cache.active_requests and len(cache.cached_requests) == 6   # stopped, responses kept


def test_arctic_suffix_runs_as_a_bench_row(tiny_lm_tok):
    pytest.importorskip("arctic_inference.suffix_decoding")
    _, runs = bench_one_question(tiny_lm_tok, "", "arctic_suffix", 12, "hello there, general hello there")
    assert [r.method for r in runs] == ["vanilla", "arctic_suffix"]
    peer = runs[1]
    assert peer.output_ids == runs[0].output_ids and peer.steps is not None   # steps measured, unlike hf peers
    assert peer.divergence is not None and peer.divergence["verdict"] == "identical"


@pytest.mark.parametrize("peer", ["hf_greedy", "hf_prompt_lookup"])
def test_transformers_generate_rows_are_judged_with_their_own_logits(tiny_lm_tok, peer):
    """transformers' generate returns the logits it committed by: one top-logits row per token,
    its argmax the token, so the verdict against vanilla is two-sided and records the drift."""
    from specviz.bench.methods import parse_methods
    from specviz.bench.runner import run_peer

    _, runs = bench_one_question(tiny_lm_tok, "", peer, 12, "hello there, general hello there")
    assert runs[1].output_ids == runs[0].output_ids
    d = runs[1].divergence
    assert d["verdict"] == "identical" and d["drift"] is not None and d["drift"] < 1e-3   # fp32: no real drift
    method = parse_methods("", peer)[0][-1]
    peer = run_peer(tiny_lm_tok, method, tuple(range(5, 25)), 10, None)
    top = peer.top_logits
    assert top is not None and len(top) == len(peer.ids) > 0 and peer.seconds > 0
    assert [row[0][0] for row in top] == list(peer.ids) and all(len(row) == 4 for row in top)
    vocab = tiny_lm_tok.model.config.vocab_size                          # [1, V] float32 kept per token
    assert peer.kept_mib == pytest.approx(len(peer.ids) * vocab * 4 / 2**20)


# ---- draftretriever_aded ---------------------------------------------------------------------

@pytest.fixture()
def tiny_index(tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))     # the datastore is built there
    docs = model_documents(tiny_lm, random.Random(5))
    tokens = np.asarray([t for doc in docs for t in doc + [SEP]], dtype=np.int32)
    build_corpus_parts(tmp_path / "index", ("suffix", "trigram"), None, 64, tokens=tokens)
    return str(tmp_path / "index"), docs


def test_draftretriever_aded_is_lossless_and_drafts_from_the_corpus(tiny_lm, tiny_index):
    pytest.importorskip("draftretriever")
    from specviz.peers.draftretriever_aded import datastore_path
    from specviz.index.store import open_index

    folder, docs = tiny_index
    spec = ENGINE_PEERS["draftretriever_aded"].spec()
    store = DrafterStore()
    accepted = 0
    for doc in docs[:4]:
        prompt = doc[:8]                                 # its continuation is in the corpus
        vanilla, _ = run_ids(tiny_lm, prompt, max_new_tokens=24)
        out, steps = _steps(tiny_lm, prompt, spec, {"corpus_index": folder}, store, 24)
        assert out == vanilla
        assert all(set(s.tree.sources) <= {"draftretriever"} for s in steps)
        accepted += sum(len(s.accepted) for s in steps)
    assert accepted > 8
    assert datastore_path(open_index(folder)).is_file()  # built once, reused by the next generation
    assert len(store) == 1
