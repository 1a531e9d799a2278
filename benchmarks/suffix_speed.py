"""How fast specviz's SuffixDecoding drafts beside the authors' code (arctic-inference's
SuffixDecodingCache, the `arctic_suffix` peer): benchmarks/README.md, "The authors' code as peers".

    .venv/bin/python benchmarks/suffix_speed.py                 # replay the stored streams
    .venv/bin/python benchmarks/suffix_speed.py --record        # re-record them (loads the embedded model)

Model-free: it replays token streams (benchmarks/suffix-speed/streams.json: Spec-Bench questions,
the first turn in the embedded model's chat template, and that model's recorded greedy answer)
through both drafters, with the settings of the bench pair (`suffix_decoding[...]` beside
`arctic_suffix`, peers/__init__.py), one DrafterStore for the whole run as a bench run has, so
each global tree grows with every answer. Per step, the calls the engine makes: the drafter's
`propose` (timed as search) and, with the step's committed tokens, its `observe` (timed as
update), for both drafters in turn (which goes first alternates), through the same DraftContext
and StepView. A step commits what a greedy target would: the longest path of specviz's draft
that the recorded answer follows, then the answer's next token; both drafters learn the same
tokens. The first --warmup streams are replayed untimed. Also counted: steps where both drafts
have the same size, match length and score (as tests/test_peers.py checks; on count ties the
tokens may differ) and the same tokens.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.drafters.kit.base import DraftContext, DraftSetup, StepView  # noqa: E402
from specviz.drafters.kit.choice import parse_choice  # noqa: E402
from specviz.drafters.kit.store import DrafterStore  # noqa: E402
from specviz.peers import ENGINE_PEERS  # noqa: E402
from specviz.core.timing import PhaseTimer  # noqa: E402
from specviz.core.tree import DraftTree  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = ROOT / "specviz" / "data" / "specbench" / "question.jsonl"
STREAMS = ROOT / "benchmarks" / "suffix-speed" / "streams.json"
PEER = ENGINE_PEERS["arctic_suffix"]


def record(path: Path, per_category: int, max_new_tokens: int) -> None:
    """The first `per_category` questions of each Spec-Bench category, first turn, answered
    greedily by the embedded model (drafted by suffix_decoding: lossless, faster than vanilla)."""
    from specviz.core.decoding import DecodingConfig
    from specviz.engine import generate
    from specviz.models import load_model
    from specviz.models.prompts import build_prompt
    lm = load_model("embedded")
    seen: dict[str, int] = {}
    streams = []
    for line in QUESTIONS.read_text(encoding="utf-8").splitlines():
        q = json.loads(line)
        if seen.get(q["category"], 0) >= per_category:
            continue
        seen[q["category"]] = seen.get(q["category"], 0) + 1
        prompt = build_prompt(lm.tokenizer, q["turns"][0])
        trace = generate(lm, prompt, "suffix_decoding", {}, DecodingConfig(max_new_tokens=max_new_tokens))
        streams.append({"question_id": q["question_id"], "category": q["category"],
                        "prompt": list(prompt.ids), "output": list(trace.output_ids)})
        print(f"{q['question_id']} {q['category']}: {len(prompt.ids)} + {len(trace.output_ids)} tokens",
              file=sys.stderr)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"model": "embedded", "max_new_tokens": max_new_tokens,
                                "vocab_size": lm.vocab_size, "streams": streams}) + "\n")


def accepted_path(tree: DraftTree, answer: list[int]) -> tuple[int, ...]:
    """Node ids of the longest path of `tree` from its root that `answer` follows."""
    out: list[int] = []
    node = -1
    while len(out) < len(answer):
        nxt = next((c for c in tree.children[node] if tree.tokens[c] == answer[len(out)]), None)
        if nxt is None:
            break
        out.append(nxt)
        node = nxt
    return tuple(out)


class Side:
    """One drafter and its per-step times (µs)."""

    def __init__(self, name: str, spec: Any, config: Any) -> None:
        self.name, self.spec, self.config = name, spec, config
        self.search: list[float] = []
        self.update: list[float] = []
        self.drafter: Any = None

    def start(self, setup: DraftSetup) -> None:
        self.drafter = self.spec.make(self.config, setup)

    def propose(self, tokens: list[int], prompt_len: int, step: int, budget: int,
                timed: bool) -> tuple[DraftTree, dict[str, Any]]:
        ctx = DraftContext(tokens, prompt_len, step, budget, lambda n: 0.1 + 0.001 * n, PhaseTimer(None))
        start = time.perf_counter_ns()
        tree = self.drafter.propose(ctx)
        if timed:
            self.search.append((time.perf_counter_ns() - start) / 1e3)
        return tree, ctx.info

    def observe(self, view: StepView, timed: bool) -> None:
        start = time.perf_counter_ns()
        self.drafter.observe(view)
        if timed:
            self.update.append((time.perf_counter_ns() - start) / 1e3)


def replay(data: dict[str, Any], warmup: int, limit: int) -> tuple[Side, Side, dict[str, int]]:
    choice = parse_choice(PEER.counterpart)
    ours = Side("suffix_decoding", choice.spec, choice.config())
    theirs = Side("arctic_suffix", PEER.spec(), PEER.spec().config({}))
    store = DrafterStore()
    agree = {"steps": 0, "same_score": 0, "same_tokens": 0, "same_accepted": 0}
    streams = data["streams"][: limit or None]
    for n, s in enumerate(streams):
        timed = n >= warmup
        prompt, answer = list(s["prompt"]), list(s["output"])
        setup = DraftSetup(tuple(prompt), data["vocab_size"], frozenset(), len(answer), store=store)
        ours.start(setup)
        theirs.start(setup)
        tokens, done, step = list(prompt), 0, 0
        while done < len(answer):
            budget = len(answer) - done
            pair = (ours, theirs) if step % 2 == 0 else (theirs, ours)
            drafts = {side.name: side.propose(list(tokens), len(prompt), step, budget, timed) for side in pair}
            (mine, info), (other, other_info) = drafts[ours.name], drafts[theirs.name]
            acc = accepted_path(mine, answer[done:])
            new = tuple([mine.tokens[i] for i in acc] + answer[done + len(acc): done + len(acc) + 1])
            new = new[:budget]
            tokens.extend(new)
            agree["steps"] += 1
            agree["same_score"] += len(mine) == len(other) and (not len(mine) or (
                info["match_len"] == other_info["match_len"] and abs(info["score"] - other_info["score"]) < 1e-3))
            agree["same_tokens"] += mine.tokens == other.tokens
            agree["same_accepted"] += len(acc) == len(accepted_path(other, answer[done:]))
            views = {ours.name: StepView(mine, acc, new, tokens, ()),
                     theirs.name: StepView(other, accepted_path(other, list(new)), new, tokens, ())}
            for side in pair:
                side.observe(views[side.name], timed)
            done += len(new)
            step += 1
    return ours, theirs, agree


def summary(values: list[float]) -> str:
    return f"mean {statistics.mean(values):7.1f} µs, median {statistics.median(values):7.1f} µs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", default=str(STREAMS))
    parser.add_argument("--record", action="store_true", help="re-record the streams with the embedded model")
    parser.add_argument("--per-category", type=int, default=1, help="with --record: questions per category")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="with --record")
    parser.add_argument("--warmup", type=int, default=1, help="streams replayed first, untimed")
    parser.add_argument("--limit", type=int, default=0, help="replay only the first N streams (0: all)")
    parser.add_argument("--repeats", type=int, default=1, help="replay the whole set this many times, "
                                                               "each from empty trees; times pooled")
    args = parser.parse_args()
    path = Path(args.streams)
    if args.record:
        record(path, args.per_category, args.max_new_tokens)
    if not PEER.available():
        raise SystemExit(PEER.why_unavailable())
    data = json.loads(path.read_text())
    pooled: dict[str, dict[str, list[float]]] = {"suffix_decoding": {"search": [], "update": []},
                                                "arctic_suffix": {"search": [], "update": []}}
    for _ in range(args.repeats):
        ours, theirs, agree = replay(data, args.warmup, args.limit)
        for side in (ours, theirs):
            pooled[side.name]["search"] += side.search
            pooled[side.name]["update"] += side.update
    streams = len(data["streams"][: args.limit or None])
    print(f"{streams} streams ({args.warmup} untimed), {agree['steps']} steps, ours: {PEER.counterpart}")
    print(f"same size, match length and score: {agree['same_score']}/{agree['steps']}; same tokens: "
          f"{agree['same_tokens']}/{agree['steps']}; same accepted length: {agree['same_accepted']}/{agree['steps']}")
    means = {}
    for name, times in pooled.items():
        total = [a + b for a, b in zip(times["search"], times["update"])]
        means[name] = statistics.mean(total)
        print(f"{name:16s} search {summary(times['search'])} | update {summary(times['update'])} | "
              f"both {summary(total)} ({len(total)} timed steps)")
    print(f"ours / arctic (mean search + update a step): {means['suffix_decoding'] / means['arctic_suffix']:.2f}")


if __name__ == "__main__":
    main()
