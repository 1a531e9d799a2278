"""Offline replay of hierarchy's tree sizing: which chance model keeps the best trees?

`record` runs `hierarchy` (its rule then: share_chances off) on Spec-Bench questions and
keeps, per step, the uncut candidate tree, its buckets and the through-counts; the greedy
output (identical to vanilla's) then says which node of every uncut tree the verifier would
have accepted. `evaluate` replays those steps through TreeCutter under several chance
models (the trust learned online as in the drafter) and prints tokens per step, verify cost
per step in plain steps (the model's calibrated VerifyCost) and the expected speedup they
give, beside the best cut knowing the answer. It ignores drafting time and the way smaller
trees change what is recycled into the context DB: a guide for choosing, not a measurement
(benchmarks/hierarchy-chances/ is the measurement).

    .venv/bin/python benchmarks/hierarchy_replay.py record --limit 8 --categories qa
    .venv/bin/python benchmarks/hierarchy_replay.py evaluate
"""
from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from specviz.bench.questions import DEFAULT_QUESTIONS, read_questions, select  # noqa: E402
from specviz.core.decoding import DecodingConfig  # noqa: E402
from specviz.drafters.kit import tree_cutter  # noqa: E402
from specviz.drafters.kit.tree_cutter import TreeCutter  # noqa: E402
from specviz.core.tree import DraftTree  # noqa: E402

RECORDS = Path("benchmarks/results/hierarchy-replay.pkl")


def record(limit: int, categories: list[str], out: Path) -> None:
    from specviz.engine import generate
    from specviz.models import load_model
    from specviz.models.prompts import build_prompt

    lm = load_model("embedded")
    questions, _ = read_questions(Path(DEFAULT_QUESTIONS))
    records: list[dict[str, Any]] = []
    cut = TreeCutter.cut

    def spy(self, tree, ratios, buckets, verify_cost, enabled=True, info=None):
        records[-1]["steps"].append(dict(tokens=tree.tokens, parents=tree.parents, sources=tree.sources,
                                         scores=tree.scores, buckets=list(buckets)))
        return cut(self, tree, ratios, buckets, verify_cost, enabled, info)

    tree_cutter.TreeCutter.cut = spy                   # type: ignore[method-assign]
    for q in select(questions, categories, limit):
        prompt = build_prompt(lm.tokenizer, q.turns[0])
        records.append(dict(qid=q.question_id, steps=[]))
        trace = generate(lm, prompt, "hierarchy", {"share_chances": False}, DecodingConfig(max_new_tokens=128))
        pos = len(prompt.ids)
        for rec, step in zip(records[-1]["steps"], trace.steps):
            rec["pos"] = pos                              # committed length before the step
            pos += len(step.new_tokens)
        records[-1]["full"] = list(prompt.ids) + list(trace.output_ids)
        print(q.question_id, trace.totals.steps, "steps", trace.totals.new_tokens, "tokens", file=sys.stderr)
    costs = [lm.verify_cost.predict(k) for k in range(65)]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(pickle.dumps(dict(records=records, costs=costs)))
    print(f"wrote {out}", file=sys.stderr)


def accepted_nodes(tree: DraftTree, full: list[int], pos: int) -> tuple[int, ...]:
    """The nodes greedy verification accepts: the path spelling full[pos:]."""
    out: list[int] = []
    par, d = -1, 0
    while pos + d < len(full):
        nxt = [i for i, (t, p) in enumerate(zip(tree.tokens, tree.parents)) if p == par and t == full[pos + d]]
        if not nxt:
            break
        par = nxt[0]
        out.append(par)
        d += 1
    return tuple(out)


def shares(st: dict[str, Any]) -> list[float]:
    """Per node: the fraction of the candidates through its parent that go through it."""
    through, parents = st["scores"], st["parents"]
    chains = sum(through[i] for i, p in enumerate(parents) if p < 0)
    return [through[i] / (chains if p < 0 else through[p]) for i, p in enumerate(parents)]


Model = Callable[[dict[str, Any]], tuple[list[float], list[Any]]]
MODELS: dict[str, Model] = {
    "ratio 1, trust per DB and rank (old)": lambda st: ([1.0] * len(st["tokens"]), st["buckets"]),
    "share of candidates, per DB and rank (new)": lambda st: (shares(st), st["buckets"]),
    "share below the root only": lambda st: ([1.0 if p < 0 else r for p, r in zip(st["parents"], shares(st))],
                                             st["buckets"]),
    "ratio 1, trust per DB only": lambda st: ([1.0] * len(st["tokens"]), [b[0] for b in st["buckets"]]),
    "share of candidates, per DB only": lambda st: (shares(st), [b[0] for b in st["buckets"]]),
}


def replay(data: dict[str, Any], model: Model | None, enabled: bool = True) -> tuple[float, float, float]:
    """(tokens per step, verify cost per step in plain steps, expected speedup); model None =
    the best cut knowing the answer (keep exactly the accepted path)."""
    costs = data["costs"]
    cost = lambda k: costs[min(k, len(costs) - 1)]     # noqa: E731
    tokens = steps = 0
    seconds = 0.0
    for rec in data["records"]:
        cutter = TreeCutter(0.3, 0.7, 8)                  # hierarchy's priors and explore_every
        for st in rec["steps"]:
            tree = DraftTree(tuple(st["tokens"]), tuple(st["parents"]), tuple(st["sources"]))
            if model is None:
                kept = len(accepted_nodes(tree, rec["full"], st["pos"]))
                acc: tuple[int, ...] = tuple(range(kept))
            else:
                ratios, buckets = model(st)
                tree, _ = cutter.cut(tree, ratios, buckets, cost, enabled)
                acc = accepted_nodes(tree, rec["full"], st["pos"])
                cutter.observe(SimpleNamespace(tree=tree, accepted=acc))
                kept = len(tree)
            tokens += 1 + len(acc)
            seconds += cost(kept)
            steps += 1
    return tokens / steps, seconds / steps / cost(0), tokens / seconds * cost(0)


def evaluate(path: Path) -> None:
    data = pickle.loads(path.read_bytes())
    n = sum(len(r["steps"]) for r in data["records"])
    print(f"{len(data['records'])} questions, {n} steps")
    print("| chance model | tokens / step | verify / plain step | expected speedup |\n|---|---|---|---|")
    rows = [("best cut knowing the answer", replay(data, None)),
            ("no cut", replay(data, MODELS["ratio 1, trust per DB and rank (old)"], enabled=False))]
    rows += [(name, replay(data, m)) for name, m in MODELS.items()]
    for name, (tps, cps, speed) in rows:
        print(f"| {name} | {tps:.2f} | {cps:.2f} | {speed:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--limit", type=int, default=8)
    rec.add_argument("--categories", default="qa")
    rec.add_argument("--out", type=Path, default=RECORDS)
    ev = sub.add_parser("evaluate")
    ev.add_argument("--records", type=Path, default=RECORDS)
    args = parser.parse_args()
    if args.command == "record":
        record(args.limit, args.categories.split(","), args.out)
    else:
        evaluate(args.records)


if __name__ == "__main__":
    main()
