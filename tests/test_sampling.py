"""Speculative sampling is lossless: with any draft tree, every committed token is
distributed as the target's own sampling distribution, in every recorder (engine/record.py).

Engine level: over many seeds, the first two generated tokens of tiny_lm (vocab 64) are
compared by a chi-square test with the exact distribution p(x1) p(x2 | x1), computed from
plain forwards and an independent implementation of temperature / top-k / top-p; each drafter
in each recorder (teach, bench, off). The same check rejects deliberately wrong acceptance
rules (written, like the engine's, as per-row draws on the device: accept.sample_rows), so it
has the power to catch one.
Unit level: accept.accept_sampling (the device rule, then the walk) on hand-made p and q vectors.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from conftest import network_drafter_config
from scipy.stats import chisquare

import specviz.engine.verify as verify
from specviz.engine.accept import Acceptance, RowDraws, accept_sampling, categorical, sibling_slots
from specviz.engine.record import RECORDER_NAMES
from specviz.models.cost import VerifyCost
from specviz.core.decoding import DecodingConfig, target_probs
from specviz.drafters.kit.base import REGISTRY, DrafterSpec, register
from specviz.engine import generate_steps
from specviz.core.settings import Settings
from specviz.core.tree import DraftTree

# The trie of this prompt matches its last token (35) and drafts a tree with two children
# (50 and 19, about 3/4 of the target's mass at T=1) and grandchildren (38 after 50, 31
# after 19): found by search so that drafts do get accepted.
PROMPT = [23, 33, 55, 9, 35, 19, 31, 19, 10, 20, 21, 35, 50, 38, 42, 16, 17, 35]
SAMPLES = 1000
SEEDS = range(SAMPLES)
ALPHA = 1e-3               # a correct sampler fails a check with this probability (fixed seeds)
WRONG_SAMPLES = 500        # wrong rules fail the same check even with half the samples

# A fixed cost table: trees of up to 7 nodes are padded to 8 rows, plain steps are not.
# (The calibrated table depends on timing; a fixed one keeps the seeded runs reproducible.)
COST = VerifyCost((1, 8, 16, 32, 64), (1.0, 1.0, 2.0, 3.0, 4.0))


# ---- reference distribution -------------------------------------------------------------

def ref_probs(logits: np.ndarray, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """softmax(logits / T), then keep the top_k tokens, then the smallest set of top tokens
    with mass >= top_p; renormalised. float64, written independently of decoding.py."""
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = np.zeros(len(p), dtype=bool)
    keep[order[: top_k or len(p)]] = True
    p = np.where(keep, p, 0.0)
    p /= p.sum()
    if top_p < 1.0:
        mass = 0.0
        nucleus = np.zeros(len(p), dtype=bool)
        for i in order:
            if mass >= top_p or p[i] == 0:
                break
            nucleus[i] = True
            mass += p[i]
        p = np.where(nucleus, p, 0.0)
        p /= p.sum()
    return p


def exact_pairs(lm, prompt, cfg: DecodingConfig) -> tuple[np.ndarray, np.ndarray]:
    """p(x1) [V] and p(x1, x2) [V, V] from plain (non-tree) forwards."""
    model, vocab = lm.model, lm.vocab_size
    with torch.inference_mode():
        first = model(input_ids=torch.tensor([prompt])).logits[0, -1].double().numpy()
        batch = torch.tensor([prompt + [x] for x in range(vocab)])
        second = model(input_ids=batch).logits[:, -1].double().numpy()
    p1 = ref_probs(first, cfg.temperature, cfg.top_k, cfg.top_p)
    p2 = np.stack([ref_probs(second[x], cfg.temperature, cfg.top_k, cfg.top_p) for x in range(vocab)])
    return p1, p1[:, None] * p2


def chi2_pvalue(counts: Counter, probs: dict, n: int, min_expected: float = 5.0) -> float:
    """Chi-square goodness of fit; bins expected fewer than `min_expected` times are pooled.
    A sample in a bin of probability 0 is an outright failure (p-value 0)."""
    if any(probs.get(k, 0.0) == 0.0 for k in counts):
        return 0.0
    obs, exp, pool_obs, pool_exp = [], [], 0, 0.0
    for key, pr in probs.items():
        if pr == 0.0:
            continue
        if n * pr >= min_expected:
            obs.append(counts.get(key, 0))
            exp.append(n * pr)
        else:
            pool_obs += counts.get(key, 0)
            pool_exp += n * pr
    if pool_exp > 0:
        obs.append(pool_obs)
        exp.append(pool_exp)
    exp_arr = np.asarray(exp) * (n / sum(exp))
    return float(chisquare(obs, exp_arr).pvalue)


@dataclass
class Sampled:
    first: Counter
    pairs: Counter
    accepted_runs: int          # generations in which some draft token was accepted
    deep_runs: int              # ... in which a depth-2 draft was accepted
    drafted_runs: int


def sample(lm, drafter, config, cfg: DecodingConfig, seeds=SEEDS, prompt=PROMPT, recorder="teach") -> Sampled:
    """The first two generated tokens for each seed (3 generated: depth-2 drafts can count)."""
    first, pairs = Counter(), Counter()
    accepted = deep = drafted = 0
    for seed in seeds:
        steps = list(generate_steps(lm, prompt, drafter, config,
                                    dataclasses.replace(cfg, seed=seed, max_new_tokens=3), recorder=recorder))
        out = [t for s in steps for t in s.new_tokens]
        first[out[0]] += 1
        pairs[(out[0], out[1])] += 1
        accepted += any(s.accepted for s in steps)
        deep += any(len(s.accepted) >= 2 for s in steps)
        drafted += any(len(s.tree) for s in steps)
    return Sampled(first, pairs, accepted, deep, drafted)


def fit_pvalues(s: Sampled, p1: np.ndarray, p12: np.ndarray) -> tuple[float, float]:
    n = sum(s.first.values())
    pv1 = chi2_pvalue(s.first, {x: float(p1[x]) for x in range(len(p1))}, n)
    pv2 = chi2_pvalue(s.pairs, {(a, b): float(p12[a, b]) for a in range(len(p1)) for b in range(len(p1))}, n)
    return pv1, pv2


# ---- fixtures: the model with a fixed cost table, a fixed-tree drafter -----------------

@pytest.fixture(scope="module")
def lm(tiny_lm):
    return dataclasses.replace(tiny_lm, verify_cost=COST)


@dataclass(frozen=True)
class _NoConfig(Settings):
    pass


def _fixed_tree(lm, prompt, cfg) -> DraftTree:
    """Root children: the 2nd most likely token, the most likely, the least likely (zero
    under top-k); under each of the first two, its two most likely successors (best second)."""
    p1, p12 = exact_pairs(lm, prompt, dataclasses.replace(cfg, temperature=1.0, top_k=0, top_p=1.0))
    order = list(np.argsort(-p1))
    a, b, z = int(order[1]), int(order[0]), int(order[-1])
    tokens, parents = [a, b, z], [-1, -1, -1]
    for parent_idx, x in ((0, a), (1, b)):
        succ = list(np.argsort(-p12[x]))
        tokens += [int(succ[1]), int(succ[0])]
        parents += [parent_idx, parent_idx]
    return DraftTree(tuple(tokens), tuple(parents), ("test",) * len(tokens))


class _FixedTreeDrafter:
    tree: DraftTree = DraftTree.empty()

    def __init__(self, config, setup) -> None:
        pass

    def propose(self, ctx) -> DraftTree:
        return self.tree if ctx.step == 0 else DraftTree.empty()

    def observe(self, step) -> None:
        pass


class _QChainDrafter:
    """Draws a 2-token chain from fixed distributions q1, q2 (its own RNG, advanced across
    generations), and reports them as draft_probs: Leviathan et al.'s setting."""
    q1 = q2 = None
    rng = np.random.default_rng(0)

    def __init__(self, config, setup) -> None:
        pass

    def propose(self, ctx) -> DraftTree:
        if ctx.step:
            return DraftTree.empty()
        x1 = int(self.rng.choice(len(self.q1), p=self.q1.numpy()))
        x2 = int(self.rng.choice(len(self.q2), p=self.q2.numpy()))
        return DraftTree.chain([x1, x2], "q", draft_probs=torch.stack([self.q1, self.q2]).float())

    def observe(self, step) -> None:
        pass


def _registered(name: str, cls: type):
    """Register a test drafter for one test, then remove it."""
    register(DrafterSpec(name, _NoConfig, cls, "test only", "-"))
    yield cls
    REGISTRY.pop(name, None)


@pytest.fixture
def fixed_tree_drafter():
    yield from _registered("test_fixed_tree", _FixedTreeDrafter)
    _FixedTreeDrafter.tree = DraftTree.empty()


@pytest.fixture
def q_chain_drafter():
    yield from _registered("test_q_chain", _QChainDrafter)


# ---- engine-level tests ----------------------------------------------------------------

T1 = DecodingConfig(temperature=1.0)
WARPED = DecodingConfig(temperature=0.8, top_k=8, top_p=0.9)
every_recorder = pytest.mark.parametrize("recorder", RECORDER_NAMES)


def assert_lossless_sampling(lm, drafter: str, config, cfg: DecodingConfig = T1,
                             prompt: list[int] = PROMPT, recorder: str = "teach") -> Sampled:
    """Sample `drafter` from `prompt` and check the first two tokens' distributions against the
    exact ones (both p-values above ALPHA); returns the samples for further checks."""
    p1, p12 = exact_pairs(lm, prompt, cfg)
    s = sample(lm, drafter, config, cfg, prompt=prompt, recorder=recorder)
    pv1, pv2 = fit_pvalues(s, p1, p12)
    assert pv1 > ALPHA and pv2 > ALPHA, (pv1, pv2)
    return s


@every_recorder
def test_vanilla_sampling_matches_target(lm, recorder):
    p1, p12 = exact_pairs(lm, PROMPT, T1)
    s = sample(lm, "vanilla", None, T1, seeds=range(300), recorder=recorder)
    assert min(fit_pvalues(s, p1, p12)) > ALPHA
    assert s.drafted_runs == 0


@every_recorder
def test_ngram_trie_sampling_is_lossless(lm, recorder):
    s = assert_lossless_sampling(lm, "ngram_trie", {"size_by_cost": False}, recorder=recorder)
    # the trie drafted every time and its drafts were often accepted, sometimes 2 deep
    assert s.drafted_runs == SAMPLES
    assert s.accepted_runs > SAMPLES // 3
    assert s.deep_runs > SAMPLES // 20


@pytest.mark.parametrize("drafter, config", [
    # the prompt's bigrams: 35 -> [50, 19], 50 -> [38], 19 -> [10, 31]: drafts at the first step
    ("token_recycling", {"size_by_cost": False, "init_from_prompt": True}),
    # the prompt tree: after 35, 19 and 50 (1/3 each), then 31 / 38; 4 tokens for a 1-token match
    ("suffix_decoding", {"size_by_cost": False, "global_tree": False, "max_spec_factor": 4.0}),
])
@every_recorder
def test_recycling_and_suffix_sampling_is_lossless(lm, drafter, config, recorder):
    s = assert_lossless_sampling(lm, drafter, config, recorder=recorder)
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 3


@every_recorder
@pytest.mark.parametrize("cfg", [T1, WARPED], ids=["T1", "T0.8-topk8-topp0.9"])
def test_fixed_tree_sampling_is_lossless(lm, fixed_tree_drafter, cfg, recorder):
    fixed_tree_drafter.tree = _fixed_tree(lm, PROMPT, cfg)
    p1, p12 = exact_pairs(lm, PROMPT, cfg)
    if cfg is WARPED:
        assert p1[fixed_tree_drafter.tree.tokens[2]] == 0.0    # a draft the target never samples
    s = sample(lm, "test_fixed_tree", None, cfg, recorder=recorder)
    pv1, pv2 = fit_pvalues(s, p1, p12)
    assert pv1 > ALPHA and pv2 > ALPHA, (pv1, pv2)
    assert s.accepted_runs > SAMPLES // 2 and s.deep_runs > SAMPLES // 10


@every_recorder
def test_q_chain_sampling_is_lossless(lm, q_chain_drafter, recorder):
    """Drafts drawn from q != p, with draft_probs: the engine passes q to the rule."""
    p1, p12 = exact_pairs(lm, PROMPT, T1)
    # q1 over-weights the 3rd..6th most likely tokens, q2 is flat over a few tokens
    order = np.argsort(-p1)
    q1 = torch.full((64,), 0.2 / 60, dtype=torch.float64)
    q1[torch.tensor(order[2:6].copy())] = 0.2
    q2 = torch.zeros(64, dtype=torch.float64)
    q2[torch.tensor(order[:8].copy())] = 1 / 8
    q_chain_drafter.q1, q_chain_drafter.q2 = (q1 / q1.sum()).float(), q2.float()
    s = sample(lm, "test_q_chain", None, T1, recorder=recorder)
    pv1, pv2 = fit_pvalues(s, p1, p12)
    assert pv1 > ALPHA and pv2 > ALPHA, (pv1, pv2)
    assert s.accepted_runs > SAMPLES // 10


def test_the_recorder_never_touches_the_draws(lm, fixed_tree_drafter):
    """Seed by seed, every recorder commits the same tokens (it reads the logits, never the
    generator), so each one's samples are the others'."""
    fixed_tree_drafter.tree = _fixed_tree(lm, PROMPT, WARPED)
    for seed in range(40):
        outs = {r: [t for s in generate_steps(lm, PROMPT, "test_fixed_tree", None,
                                               dataclasses.replace(WARPED, seed=seed, max_new_tokens=4),
                                               recorder=r) for t in s.new_tokens]
                for r in RECORDER_NAMES}
        assert len(set(map(tuple, outs.values()))) == 1, (seed, outs)


# ---- the check has power: wrong rules fail it ------------------------------------------

def _accept_first_child(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> RowDraws:
    """WRONG: always accept the first child, then sample the bonus from p."""
    choice = torch.full((len(tree) + 1,), -1, dtype=torch.long)
    for parent, kids in tree.children.items():
        if kids:
            choice[parent + 1] = kids[0]
    return RowDraws(choice, categorical(probs, generator))


def _no_residual(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> RowDraws:
    """WRONG: accept child x with probability p(x), but after rejections sample the bonus
    from the unchanged p (forgetting to remove the rejected drafts)."""
    u = torch.rand(len(tree), generator=generator)
    choice = torch.full((len(tree) + 1,), -1, dtype=torch.long)
    for rows, nodes in reversed(sibling_slots(tree)):
        for r, c in zip(rows, nodes):
            if u[c] < probs[r, tree.tokens[c]]:
                choice[r] = c
    return RowDraws(choice, categorical(probs, generator))


@pytest.mark.parametrize("rule", [_accept_first_child, _no_residual], ids=lambda f: f.__name__)
def test_wrong_rules_are_detected(lm, fixed_tree_drafter, monkeypatch, rule):
    fixed_tree_drafter.tree = _fixed_tree(lm, PROMPT, T1)
    p1, p12 = exact_pairs(lm, PROMPT, T1)
    monkeypatch.setattr(verify, "sample_rows", rule)
    s = sample(lm, "test_fixed_tree", None, T1, seeds=range(WRONG_SAMPLES))
    pv1, pv2 = fit_pvalues(s, p1, p12)
    assert pv1 < 1e-6 and pv2 < 1e-6, (pv1, pv2)


# ---- target_probs vs the reference --------------------------------------------------------

@pytest.mark.parametrize("temperature,top_k,top_p", [
    (1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 5, 1.0), (1.0, 0, 0.5), (0.9, 10, 0.8), (1.0, 1, 1.0),
    (1.0, 0, 1e-6), (2.0, 64, 0.999)])
def test_target_probs_matches_reference(temperature, top_k, top_p):
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 64, generator=gen) * 3
    cfg = DecodingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
    got = target_probs(logits, cfg).double().numpy()
    for row in range(5):
        ref = ref_probs(logits[row].numpy(), temperature, top_k, top_p)
        np.testing.assert_allclose(got[row], ref, atol=1e-6)
        assert (got[row] > 0).sum() == (ref > 0).sum()


def test_target_probs_greedy_is_one_hot():
    logits = torch.tensor([[0.1, 3.0, -1.0], [5.0, 4.0, 4.5]])
    assert target_probs(logits, DecodingConfig()).tolist() == [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]


# ---- accept_sampling unit tests ----------------------------------------------------------
P = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04, 0.0, 0.0])          # row 0: after the root
P_NEXT = torch.tensor([0.05, 0.05, 0.30, 0.30, 0.10, 0.10, 0.10, 0.0])    # row 1: after node 0
Q = torch.tensor([0.05, 0.10, 0.30, 0.05, 0.20, 0.10, 0.20, 0.0])         # q(x) > p(x) at 2, 4, 5, 6
UNIT_N = 6000


def _first_token(tree: DraftTree, acc: Acceptance) -> int:
    return tree.tokens[acc.accepted[0]] if acc.accepted else acc.bonus


def _check(counts: Counter, p: torch.Tensor, n: int) -> None:
    pv = chi2_pvalue(counts, {x: float(p[x]) for x in range(len(p))}, n)
    assert pv > ALPHA, (pv, sorted(counts.items()))


def test_accept_sampling_leviathan_chain():
    """A 2-token chain drawn from q: the first committed token ~ p, and after an accepted
    first token the next committed token ~ p(.| x1)."""
    gen = torch.Generator().manual_seed(0)
    firsts, seconds = Counter(), Counter()
    for _ in range(UNIT_N):
        x1, x2 = (int(torch.multinomial(Q, 1, generator=gen)) for _ in range(2))
        tree = DraftTree.chain([x1, x2], "q", draft_probs=torch.stack([Q, Q]))
        # row 2 (after node 1) never matters for the first two tokens
        acc = accept_sampling(tree, torch.stack([P, P_NEXT, P]), gen)
        firsts[_first_token(tree, acc)] += 1
        if acc.accepted:
            seconds[x2 if len(acc.accepted) == 2 else acc.bonus] += 1
    _check(firsts, P, UNIT_N)
    assert sum(seconds.values()) > UNIT_N // 3
    _check(seconds, P_NEXT, sum(seconds.values()))


def test_accept_sampling_deterministic_siblings():
    """Point-mass drafts (q = one-hot): 3 fixed children, one of them impossible under p."""
    gen = torch.Generator().manual_seed(1)
    tree = DraftTree((1, 6, 0), (-1, -1, -1), ("x",) * 3)
    probs = torch.stack([P, P_NEXT, P_NEXT, P_NEXT])
    counts = Counter(_first_token(tree, accept_sampling(tree, probs, gen)) for _ in range(UNIT_N))
    assert counts[6] == 0
    _check(counts, P, UNIT_N)


def test_accept_sampling_siblings_without_replacement():
    """Children drawn from q one after another without replacement, each with the q it was
    drawn from (earlier siblings removed): recursive rejection sampling, lossless."""
    gen = torch.Generator().manual_seed(2)
    counts = Counter()
    for _ in range(UNIT_N):
        q, toks, rows = Q.clone(), [], []
        for _ in range(3):
            row = q / q.sum()
            x = int(torch.multinomial(row, 1, generator=gen))
            toks.append(x)
            rows.append(row)
            q[x] = 0.0
        tree = DraftTree(tuple(toks), (-1, -1, -1), ("q",) * 3, draft_probs=torch.stack(rows))
        counts[_first_token(tree, accept_sampling(tree, torch.stack([P] * 4), gen))] += 1
    _check(counts, P, UNIT_N)


def test_accept_sampling_point_mass_target():
    """p one-hot (greedy as a limit): only the argmax can ever be committed."""
    gen = torch.Generator().manual_seed(3)
    p = torch.zeros(8)
    p[3] = 1.0
    tree = DraftTree((5, 3), (-1, 0), ("x", "x"))
    for _ in range(200):
        acc = accept_sampling(tree, torch.stack([p, p, p]), gen)
        assert acc.accepted == () and acc.bonus == 3
    tree = DraftTree((3, 3), (-1, 0), ("x", "x"))
    acc = accept_sampling(tree, torch.stack([p, p, p]), gen)
    assert acc.accepted == (0, 1) and acc.bonus == 3


def test_accept_sampling_iid_siblings_sharing_q_is_not_lossless():
    """Why tree.py asks for siblings drawn without replacement: two children drawn i.i.d.
    from one q, de-duplicated (a DraftTree has no duplicate siblings) and both given that
    q, bias the committed token. The chi-square check catches it."""
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    q = torch.tensor([0.1, 0.2, 0.3, 0.4])
    gen = torch.Generator().manual_seed(4)
    counts = Counter()
    for _ in range(UNIT_N):
        toks = list(dict.fromkeys(int(t) for t in torch.multinomial(q, 2, replacement=True, generator=gen)))
        tree = DraftTree(tuple(toks), (-1,) * len(toks), ("q",) * len(toks),
                         draft_probs=q.expand(len(toks), 4).clone())
        counts[_first_token(tree, accept_sampling(tree, torch.stack([p] * (len(toks) + 1)), gen))] += 1
    assert chi2_pvalue(counts, {x: float(p[x]) for x in range(4)}, UNIT_N) < 1e-4


@every_recorder
@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_eagle_sampling_is_lossless(lm, kind, tmp_path, recorder):
    """eagle / eagle3 with a random-init head (tests/test_eagle.py), its tree cut by COST to a few
    nodes, siblings included: the first two tokens' distributions are the target's."""
    from test_eagle import save_random

    folder = save_random(lm, kind, tmp_path / kind)
    s = assert_lossless_sampling(lm, kind, {"checkpoint": folder, "top_k": 3, "depth": 2, "total_tokens": 8,
                                            "size_by_cost": False}, recorder=recorder)
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 50


def test_fr_spec_sampling_is_lossless(lm, tmp_path):
    """eagle drafting over FR-Spec's hot tokens (hot_vocab: 40 of the 64, from a token map): its
    drafts stay deterministic top-k, so the multi-candidate rule keeps the target's distribution."""
    from test_eagle import save_random

    folder = save_random(lm, "eagle", tmp_path / "eagle")
    hot = torch.randperm(lm.vocab_size, generator=torch.Generator().manual_seed(0))[:40].tolist()
    torch.save(hot, tmp_path / "freq_40.pt")
    s = assert_lossless_sampling(lm, "eagle", {"checkpoint": folder, "top_k": 3, "depth": 2, "total_tokens": 8,
                                               "size_by_cost": False, "hot_vocab": 40,
                                               "token_map": str(tmp_path / "freq_40.pt")})
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 50


@every_recorder
def test_mtp_sampling_is_lossless(lm, tmp_path, recorder):
    """mtp with a module that repeats the last token (tests/test_mtp.py; as a chain its drafts are
    accepted about one time in twelve here, a random module's one in a hundred), drafting SGLang's tree
    (topk 3, 2 steps): siblings, and below the first the chain vLLM drafts (the same EAGLE-2
    drafting with topk 1; a second 1000-sample run for it would add a minute and no new path).
    The first two tokens' distributions are the target's."""
    from test_mtp import save_random

    folder = save_random(lm, tmp_path / "mtp", copy=True)
    s = assert_lossless_sampling(lm, "mtp", {"checkpoint": folder, "topk": 3, "num_speculative_tokens": 2,
                                             "num_draft_tokens": 8, "size_by_cost": False}, recorder=recorder)
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 50


# ---- the drafters whose own tests sit beside their networks, in the other recorders ---------------

@pytest.mark.parametrize("recorder", ["bench", "off"])
@pytest.mark.parametrize("kind", ["glide", "medusa", "hydra"])
def test_network_drafters_sample_the_target_in_every_recorder(lm, kind, recorder, tmp_path, tmp_path_factory):
    """glide (tests/test_glide.py), medusa and hydra (tests/test_heads.py) are checked there in the
    teaching recorder; here in bench and off, with a quickly made checkpoint of each: the first two
    tokens' distributions are the target's."""
    config = network_drafter_config(lm, kind, tmp_path, tmp_path_factory)
    s = assert_lossless_sampling(lm, kind, config, recorder=recorder)
    assert s.drafted_runs == SAMPLES and s.accepted_runs > SAMPLES // 50
