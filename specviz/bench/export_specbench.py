"""`bench --export specbench DIR`: a run as Spec-Bench's own answer files, so its
evaluation/speed.py (and anything else that reads Spec-Bench's `model_answer/`) can read it.

    DIR/model_answer/<model_id>.jsonl      one file per method, one line per question

Each line is what Spec-Bench's evaluation/eval.py writes (hemingkx/Spec-Bench):
    {"question_id", "category", "answer_id", "model_id",
     "choices": [{"index", "turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths"}],
     "tstamp"}
with one entry per turn in each choice's lists, one choice per repeat (`index` = repeat), lines
sorted by question_id. `model_id` follows Spec-Bench's naming, `<model>-<method>-<dtype>-temp-0.0`
(vanilla's file is speed.py's --base-path). transformers' peers do not report their steps:
their `decoding_steps` are null and `accept_lengths` empty, except hf_greedy (one token a step).
"""
from __future__ import annotations

import json
import re
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any, Sequence

from .metrics import Run

FORMATS = ("specbench",)


def model_id_of(model: str, method: str, dtype: str, temperature: float = 0.0) -> str:
    """Spec-Bench's file naming, e.g. 'vicuna-7b-v1.3-vanilla-float16-temp-0.0'."""
    base = Path(model.rstrip("/")).name or model

    def slug(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_")

    return f"{slug(base)}-{slug(method)}-{dtype}-temp-{float(temperature)}"


def _turn_fields(run: Run) -> tuple[int | None, list[int]]:
    if run.steps is not None:
        return run.steps, list(run.accepted_lengths)
    if run.method == "hf_greedy":          # plain greedy decoding: one token per forward
        return run.new_tokens, [1] * run.new_tokens
    return None, []


def answer_records(runs: Sequence[Run], method: str, model_id: str, tokenizer: Any,
                   tstamp: float | None = None) -> list[dict[str, Any]]:
    """One Spec-Bench answer record per question that `method` answered."""
    by_question: dict[int, dict[int, list[Run]]] = defaultdict(lambda: defaultdict(list))
    category: dict[int, str] = {}
    for run in runs:
        if run.method == method:
            by_question[run.question_id][run.repeat].append(run)
            category[run.question_id] = run.category
    records = []
    for qid in sorted(by_question):
        choices = []
        for repeat in sorted(by_question[qid]):
            turns = sorted(by_question[qid][repeat], key=lambda r: r.turn)
            steps_and_lengths = [_turn_fields(r) for r in turns]
            choices.append({
                "index": repeat,
                "turns": [tokenizer.decode(list(r.output_ids), skip_special_tokens=True).strip() for r in turns],
                "decoding_steps": [s for s, _ in steps_and_lengths],
                "new_tokens": [r.new_tokens for r in turns],
                "wall_time": [r.seconds for r in turns],
                "accept_lengths": [n for _, lengths in steps_and_lengths for n in lengths],
            })
        records.append({"question_id": qid, "category": category[qid], "answer_id": uuid.uuid4().hex[:22],
                        "model_id": model_id, "choices": choices,
                        "tstamp": time.time() if tstamp is None else tstamp})
    return records


def export_specbench(out_dir: Path | str, runs: Sequence[Run], methods: Sequence[str], model: str,
                     dtype: str, tokenizer: Any) -> list[Path]:
    """Write DIR/model_answer/<model_id>.jsonl for every method; returns the files."""
    folder = Path(out_dir) / "model_answer"
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for method in methods:
        model_id = model_id_of(model, method, dtype)
        records = answer_records(runs, method, model_id, tokenizer)
        if not records:
            continue
        path = folder / f"{model_id}.jsonl"
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        files.append(path)
    return files
