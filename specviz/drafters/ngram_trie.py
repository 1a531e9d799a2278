"""ngram_trie: N-Gram Trie speculative decoding (Chen et al.), with three extensions (the `paper`
preset turns them off).

Paper behaviour (switches off): a trie of the context's n-grams (index/ngram_trie.py), the
longest suffix of the sequence (Lp tokens, shortened until one matches) selects a subtree,
its num_draft most frequent nodes (a heap) form the draft tree.

Extensions, each a switch, for the limits the paper names:
- `insert_output`: generated tokens are fed into the trie as decoding goes, so the output's
  own repetitions are drafted too (the paper's trie is built once per prompt).
- `recency_ties`: frequency ties are broken by the most recent occurrence.
- `size_by_cost`: the tree is cut to the size that maximises expected tokens per second of
  verification (sizing.py). A node's chance of acceptance given its parent's is its trie
  count ratio times a trust learned online, kept apart for the first draft token and for
  the ones after it, per matched prefix length: measured on Spec-Bench summarization and
  rag with SmolLM2-135M, the first token after a 1-token match is accepted 15% of the time
  (33% after 2-3 tokens), but once it is, a unique continuation is accepted 60-90% of the
  time. The verify cost of k nodes is the engine's calibrated cost model. Where the
  context does not predict the output the tree shrinks to nothing, and the step costs what
  a vanilla step costs. A trust is learned only from tokens the verifier tested, so a prior
  too pessimistic for the machine would never be corrected: while a match length has had
  fewer than sizing.EXPLORE_TESTS draft tokens tested, a step after `explore_every` steps
  without a draft verifies the best chain anyway (only as many nodes as cost what one
  costs). The trust learning, sizing and exploration are the shared tree_cutter.TreeCutter
  (bucket: the matched length), fed the trie's candidates best first.

Each step's info says what the sizing decided: candidates found, nodes kept, the expected
committed tokens and predicted milliseconds of the chosen tree, and of plain decoding.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError
from ..index.ngram_trie import NgramTrie
from ..core.narration import Scene, Sentence, StepStory
from ..core.settings import setting
from ..core.tree import DraftTree
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, Preset, StepView, draft_size_setting, register
from .kit.narration import lookup_source, matched_text, sizing
from .kit.tree_cutter import TreeSizingSettings


@dataclass(frozen=True)
class NgramTrieConfig(TreeSizingSettings):
    n: int = setting(13, "n-gram window length (paper: 13).", low=2, high=64)
    prefix_len: int = setting(3, "Maximum matched prefix length Lp (paper: 3); must be < n.", low=1, high=16)
    num_draft: int = draft_size_setting(16, "Most nodes kept from the matched subtree (default 16 here; the paper "
                                            "finds 8 best, section 4.7 / Table 3, 8-32 about equal).")
    insert_output: bool = setting(True, "Also insert generated tokens into the trie (extension, on by default; "
                                  "the paper does not modify the trie during inference, Appendix B).")
    recency_ties: bool = setting(True, "Break frequency ties by the most recent occurrence (extension, on by default).")

    def check(self) -> None:
        if self.prefix_len >= self.n:
            raise ConfigError("prefix_len", f"Lp must be smaller than n ({self.n}), got {self.prefix_len}")


class NgramTrieDrafter(TokensOnly):
    def __init__(self, config: NgramTrieConfig, setup: DraftSetup) -> None:
        self.config = config
        self.trie = NgramTrie(config.n, config.prefix_len)
        self.trie.extend(setup.prompt_ids)
        # trust buckets: the matched prefix length
        self.cutter = config.cutter()

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        with ctx.timer("draft.search"):
            matched, m = self.trie.match(ctx.tokens)
            if matched is None:
                self.cutter.skip()
                return DraftTree.empty()
            t1, t2 = self.cutter.trust(m) if cfg.size_by_cost else (1.0, 1.0)
            cands = NgramTrie.top_nodes(matched, cfg.num_draft, t1, t2, cfg.recency_ties)
        with ctx.timer("draft.tree"):
            ctx.info.update(match_len=m, candidates=len(cands))
            positions = [c.node.last + (m + c.depth) - 1 for c in cands]  # latest occurrence
            sources = tuple("context" if p < ctx.prompt_len else "output" for p in positions)
            tree = DraftTree(tuple(c.node.token for c in cands), tuple(c.parent for c in cands),
                             sources, tuple(c.node.count for c in cands))
            tree, _ = self.cutter.cut(tree, [c.ratio for c in cands], [m] * len(cands), ctx, cfg.size_by_cost,
                                         best_first=True)
            if cfg.size_by_cost:         # the cutter recorded expected_tokens, predicted_ms, plain_ms
                ctx.info.update(trust_first=round(t1, 4), trust_later=round(t2, 4))
            ctx.info["kept"] = len(tree)
            ctx.info["positions"] = positions[:len(tree)]
            return tree

    def observe(self, step: StepView) -> None:
        if self.config.insert_output:
            self.trie.extend(step.new_tokens)
        self.cutter.observe(step)


PAPER = Preset(
    {"n": 13, "prefix_len": 3, "num_draft": 8, "insert_output": False, "recency_ties": False,
     "size_by_cost": False},
    "Faster In-Context Learning for LLMs via N-Gram Trie Speculative Decoding: n = 13, Lp = 3 "
    "(section 4.4, Table 2: 'the best choice of n is 13 and the maximum prefix length Lp is set to 3'); "
    "num_draft = 8 (section 4.7, Table 3: 'the speedup achieve the best when num_draft is 8'); "
    "the trie is built before inference and not modified during it (Appendix B); no extensions")

def narrate(scene: Scene) -> StepStory:
    """The matched suffix and where it sits, then the sizing with the trie's learned trust."""
    info = scene.step.info
    trust: list[Sentence] = []
    if "trust_first" in info:
        trust.append((f"Its learned trust in the trie's counts: {float(info['trust_first']):.2f} for the "
                      f"first draft token, {float(info.get('trust_later', 0)):.2f} for later ones.",))
    return StepStory(source=lookup_source(scene, matched_text(scene)), size=sizing(scene, also=trust))


SPEC = register(DrafterSpec("ngram_trie", NgramTrieConfig, NgramTrieDrafter,
                            "Draft trees from an n-gram trie over the context.",
                            "Chen et al., Faster In-Context Learning for LLMs via N-Gram Trie "
                            "Speculative Decoding",
                            family="context", order=20, is_default=True, preselected=True,
                            presets={"paper": PAPER}, confidence="chance",
                            narrate=narrate))
