"""hierarchy: Hierarchy Drafting (zomss/Hierarchy_Drafting).

Three databases ordered by temporal locality, all keyed by the last committed token, whose
values are (level - 1)-token continuations; they are read in this order until the draft set
holds `draft_set` candidates:

1. context-dependent DB (source "context"): an n-gram pool with an LRU list per key
   (index/ngram_pool.py), reset per generation, filled with the prompt's n-grams, the
   committed output's, and recycled tokens: for every verified draft node, the n-gram that
   ends with one of the target's `recycle_k` most likely next tokens after it (what the
   verifier saw but the step did not commit: the paper's recycled tokens, after Token
   Recycling's top-k). The most likely is added last, so it leads its LRU list.
2. model-dependent DB (source "model-db"): the most frequent n-grams of the target's own
   greedy answers to chat prompts (`index build --kind model-db`), static.
3. statistics DB (source "corpus"): REST's suffix array over a chat corpus; the
   continuations of the longest matching suffix, most frequent first; with `corpus_fallback`
   (the paper preset) the authors' step instead (`_corpus_authors`): REST's retriever queried
   with the last `corpus_span` tokens, then shorter spans down to 1 token, its paths taken
   longest first.

With `lookahead` on, Lookahead's Jacobi window (lookahead.JacobiWindow, the same machinery)
rides along in every verify forward (source "lookahead", never cut) and the n-grams it
completes go into the context DB: the paper's "tokens generated through parallel decoding",
as the authors' code does. The `paper` preset turns it on and recycling and cost cutting off.

The candidates are merged into one tree; each node is labelled with the first DB that
proposed it, and the step info holds how many candidates each DB gave (`db_hits`).
Extension (a switch): `size_by_cost` cuts the tree to the best expected tokens per second
(tree_cutter.TreeCutter): a node's chance given its parent is its share of the candidates
through its parent (`share_chances`; where several candidates agree on a token it is likelier)
times a trust learned per DB and rank. With `share_chances` off every node's raw chance is 1
and the trust alone sizes the tree, which over-rates bushy levels (siblings' chances then sum
past 1). Measured (benchmarks/hierarchy-chances, qa + writing + roleplay, interleaved):
1.50x with shares against 1.30x without, verify 91 ms a step against 109 (vanilla 88).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..index.candidates import rank_continuations
from ..index.mcts import cut_to_budget
from ..core.narration import Quote, Scene, Sentence, StepStory, plural
from ..core.settings import mirror_setting, setting
from ..core.tree import DraftTree, graft_chains, merge_chains
from .kit.base import DraftContext, DraftSetup, DrafterSpec, TokensOnly, Preset, StepView, register
from .kit.narration import lookup_source, sizing
from .kit.corpus_index import corpus_index_setting, resolve_index, span_setting
from .lookahead import JacobiWindow, LookaheadConfig
from .kit.tree_cutter import TreeSizingSettings
from ..index.ngram_pool import NgramPool

DBS = ("context", "model-db", "corpus")
# REST's retriever as the authors call it (FasterDecoding/REST DraftRetriever/src/lib.rs `search`
# defaults: continuations of `long` = 10 tokens; Hierarchy_Drafting passes choices=64)
REST_CONTINUATION = 10
REST_CHOICES = 64


# trust buckets per database by the rank of the chain that first reached a node: ranks 0, 1
# and 2 apart, rank 3 and beyond in one bucket so that the rarely drafted lower ranks still
# see enough tests to learn from (a choice of this project, not from the Hierarchy Drafting
# paper, which sizes no trees by trust)
RANK_BUCKETS = 3

@dataclass(frozen=True)
class HierarchyConfig(TreeSizingSettings):
    corpus_index: str = corpus_index_setting()
    level: int = setting(5, "n-gram length (the authors' LEVEL: 5); candidates are level - 1 tokens.",
                         low=2, high=12)
    draft_set: int = setting(7, "Candidates gathered across the DBs per step (the paper's N: 7).", low=1, high=64)
    use_model_db: bool = setting(True, "Read the model-dependent DB (if the index has one).")
    use_corpus: bool = setting(True, "Read the statistics DB (the corpus suffix array).")
    recycle: bool = setting(True, "Put the target's next tokens after every rejected node into the context DB.")
    recycle_k: int = setting(2, "How many of the target's most likely next tokens are recycled per node "
                                "(at most verify.TOP_K = 4).", low=1, high=4)
    corpus_span: int = span_setting(16, "Longest suffix looked up in the corpus (REST: 16; the authors use 2).")
    corpus_matches: int = setting(500, "Corpus matches whose continuations are counted (REST's retriever: "
                                       "5000).", low=1, high=20000)
    corpus_fallback: bool = setting(False, "The authors' corpus step (zomss/Hierarchy_Drafting get_db): query "
                                    "REST's retriever with the last corpus_span tokens, then with shorter spans "
                                    "down to 1 token, until the draft set is full, taking its paths longest "
                                    "first (cut to level - 1 tokens, none a prefix of one taken); off: the "
                                    "longest matching span's continuations, most frequent first.")
    lookahead: bool = setting(False, "Also run Lookahead's Jacobi window in the same forward and put its "
                              "n-grams into the context DB (the paper's parallel-decoding tokens, as the "
                              "authors' code does; the paper preset turns it on).")
    lookahead_window: int = mirror_setting(LookaheadConfig, "window", 7, "Width W of that Jacobi window (the "
                                           "authors' code: 7); its levels are level - 1.")
    share_chances: bool = setting(True, "With size_by_cost: a node's chance is its share of the candidates "
                                        "through its parent times the learned trust (off: the trust alone).")


class HierarchyDrafter(TokensOnly):
    def __init__(self, config: HierarchyConfig, setup: DraftSetup) -> None:
        self.config = config
        self.pool = NgramPool(1, config.level - 1, config.draft_set)     # the context-dependent DB
        self.pool.add_sequence(setup.prompt_ids)
        self.index, self.note = resolve_index(config.corpus_index, setup)
        self.model_db = self.index.model_db if self.index is not None and config.use_model_db else None
        self.sa = self.index.suffix if self.index is not None and config.use_corpus else None
        self.cutter = config.cutter()
        self._seen = len(setup.prompt_ids)
        self.window = (JacobiWindow(config.level, config.lookahead_window, setup.prompt_ids)
                       if config.lookahead else None)
        self._db_nodes = 0                  # nodes of the last tree that came from the DBs

    def _corpus(self, tokens: list[int], want: int) -> list[tuple[int, ...]]:
        if self.sa is None or want <= 0:
            return []
        cfg = self.config
        m = self.sa.match(tokens[-cfg.corpus_span:], cfg.corpus_span, 1)
        if not m.length:
            return []
        conts = self.sa.continuations(self.sa.positions(m, cfg.corpus_matches), cfg.level - 1)
        conts = conts[conts[:, 0] >= 0]
        if not len(conts):
            return []
        rows, counts = np.unique(conts, axis=0, return_counts=True)
        order = np.argsort(-counts, kind="stable")[:want]
        return [tuple(int(t) for t in rows[i] if t >= 0) for i in order]

    def _corpus_authors(self, tokens: list[int], want: int) -> list[tuple[int, ...]]:
        """The authors' statistics-DB step (zomss/Hierarchy_Drafting, model/hierachy/decoding.py
        get_db, lines 105-125): for the last `corpus_span` tokens, then each shorter span down to
        1, REST's retriever (FasterDecoding/REST DraftRetriever/src/lib.rs `search`: 10-token
        continuations of the matches, every prefix counted, the 64 most frequent kept, then
        `cut_to_choices` to 64 distinct tokens) gives paths; they are taken longest first, cut to
        level - 1 tokens, skipping one that is a prefix of a path taken or has one as its prefix,
        until `want` are taken. (Their padding of short paths with random tokens is not copied.)"""
        if self.sa is None or want <= 0:
            return []
        cfg = self.config
        out: list[tuple[int, ...]] = []
        for span in range(min(cfg.corpus_span, len(tokens)), 0, -1):
            m = self.sa.match(tokens[-span:], span, span)
            if not m.length:
                continue
            cands = rank_continuations(self.sa.continuations(self.sa.positions(m, cfg.corpus_matches),
                                                             REST_CONTINUATION), REST_CHOICES)
            paths = [tuple(cands.tokens[j] for j in cands.path_to(i)) for i in range(len(cands))]
            paths = [paths[i] for i in cut_to_budget([list(p) for p in paths], REST_CHOICES)]
            for path in sorted(paths, key=len, reverse=True):             # stable: ties by count
                row = path[: cfg.level - 1]
                if all(any(a != b for a, b in zip(row, o)) for o in out):
                    out.append(row)
                    if len(out) == want:
                        return out
        return out

    def propose(self, ctx: DraftContext) -> DraftTree:
        cfg = self.config
        last = ctx.tokens[-1]
        with ctx.timer("draft.search"):
            chains: list[tuple[tuple[int, ...], str]] = []
            seen: set[tuple[int, ...]] = set()
            hits = dict.fromkeys(DBS, 0)

            def take(values, db: str) -> None:
                for v in values:
                    if len(chains) >= cfg.draft_set:
                        return
                    if v and v not in seen:
                        seen.add(v)
                        chains.append((v, db))
                        hits[db] += 1

            take(self.pool.get((last,)), "context")
            if self.model_db is not None and len(chains) < cfg.draft_set:
                take((g for g, _ in self.model_db.lookup(last, cfg.draft_set)), "model-db")
            if len(chains) < cfg.draft_set:
                corpus = self._corpus_authors if cfg.corpus_fallback else self._corpus
                take(corpus(ctx.tokens, cfg.draft_set - len(chains)), "corpus")
        with ctx.timer("draft.tree"):
            tree, through, chain_nodes = merge_chains(chains)
            if cfg.share_chances:                # share of the candidates through the parent
                ratios = [through[i] / (len(chains) if par < 0 else through[par])
                          for i, par in enumerate(tree.parents)]
            else:
                ratios = [1.0] * len(tree)
            rank: dict[int, tuple[str, int]] = {}
            per_db: dict[str, int] = {}
            for (_, db), nodes in zip(chains, chain_nodes):
                r = per_db.get(db, 0)
                per_db[db] = r + 1
                for node in nodes:
                    rank.setdefault(node, (db, min(r, RANK_BUCKETS)))
            buckets = [rank[i] for i in range(len(tree))]
            tree, _ = self.cutter.cut(tree, ratios, buckets, ctx, cfg.size_by_cost)
            self._db_nodes = len(tree)
            ctx.info.update(db_hits=hits, candidates=len(chains), kept=len(tree))
            if self.window is not None:    # the Jacobi columns ride along (never cut)
                tree, column_nodes = graft_chains(tree, [(c, "lookahead") for c in self.window.chains()])
                self.window.bind(tree, column_nodes)
                ctx.info["lookahead"] = [list(lv) for lv in self.window.levels]
            if self.index is None:
                ctx.info["corpus"] = self.note
            return tree

    def observe(self, step: StepView) -> None:
        cfg = self.config
        tokens = step.tokens
        self.cutter.observe(self._db_part(step))
        if cfg.recycle and step.tree.tokens:
            # recycled first (so committed n-grams below are the most recent in each LRU list):
            # for each rejected node, the n-gram ending with the target's next token after it
            before = list(tokens[: len(tokens) - len(step.new_tokens)])[-cfg.level:]
            accepted = set(step.accepted)
            for i in range(len(step.tree)):
                if i in accepted:
                    continue
                path = [step.tree.tokens[j] for j in step.tree.path_to(i)]
                row = step.target_topk[i + 1] if step.target_topk else (step.target_top[i + 1],)
                for nxt in reversed(row[: cfg.recycle_k]):      # best last: it leads the LRU
                    seq = (before + path + [nxt])[-cfg.level:]
                    if len(seq) == cfg.level:
                        self.pool.add(seq[:1], seq[1:])
        if self.window is not None:        # the window's completed n-grams (parallel decoding)
            for gram in self.window.advance(step):
                self.pool.add(gram[:1], gram[1:])
        # committed n-grams that are new since the last step
        self.pool.add_sequence(tokens, start=max(0, self._seen - cfg.level + 1))
        self._seen = len(tokens)


    def _db_part(self, step: StepView) -> StepView:
        """The step as the cutter saw it: the DB nodes only (the Jacobi columns come after them)."""
        k = self._db_nodes
        if self.window is None or len(step.tree) <= k:
            return step
        t = step.tree
        part = DraftTree(t.tokens[:k], t.parents[:k], t.sources[:k], t.scores[:k] if t.scores else None)
        return StepView(part, tuple(i for i in step.accepted if i < k), step.new_tokens, step.tokens,
                        step.target_top[: k + 1], step.target_topk[: k + 1])


PAPER = Preset(
    {"level": 5, "draft_set": 7, "use_model_db": True, "use_corpus": True, "recycle": False,
     "lookahead": True, "lookahead_window": 7, "corpus_span": 2, "size_by_cost": False,
     "corpus_fallback": True, "corpus_matches": 5000},
    "Lossless Acceleration of LLMs with Hierarchical Drafting based on Temporal Locality in "
    "Speculative Decoding, section 3.2 (Database Design: the context DB holds the prompt's tokens "
    "and tokens from parallel decoding; Hierarchical Access: context, model, statistics DB until "
    "the draft set holds N); N = 7, LEVEL = 5, Lookahead window 7 and the suffix-array query of "
    "the last 2 tokens from the authors' code (zomss/Hierarchy_Drafting; run_vicuna.sh PREVIOUS_TOKENS=2), "
    "falling back to the last token and taking REST's paths longest first (model/hierachy/decoding.py get_db, "
    "lines 105-125; REST's retriever: up to 5000 matches, DraftRetriever/src/lib.rs search); no recycling (the "
    "authors' code fills the context DB by parallel decoding), no cost cutting")

def narrate(scene: Scene) -> StepStory:
    """What each database gave, read in order of locality."""
    info, s = scene.step.info, scene.step
    lines: list[Sentence] = []
    if "db_hits" in info:
        hits = info["db_hits"]
        lines.append(("The databases were read in order of locality, keyed by the last token ",
                      Quote(scene.committed[s.committed_len - 1: s.committed_len]),
                      f": the context DB gave {plural(hits.get('context', 0), 'candidate')}, the model DB "
                      f"{hits.get('model-db', 0)}, the corpus {hits.get('corpus', 0)}."))
    return StepStory(source=lookup_source(scene, lines), size=sizing(scene))


SPEC = register(DrafterSpec("hierarchy", HierarchyConfig, HierarchyDrafter,
                            "Context, model and corpus n-gram DBs read in order of locality (Hierarchy Drafting).",
                            "Cho et al. 2025, Lossless Acceleration of LLMs with Hierarchical Drafting "
                            "based on Temporal Locality in Speculative Decoding",
                            family="corpus", order=40, presets={"paper": PAPER}, confidence="chance",
                            narrate=narrate))
