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

DIR is checked before any model loads (`check_export_dir`: a folder this process can write,
holding no answer files of an earlier run unless the command says to replace them, as --out
does), and every file is written whole (a temporary file, then renamed).
"""
from __future__ import annotations

import json
import re
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import SpecvizError
from ..files.user_files import check_output_dir, write_text_atomic
from .metrics import Run

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

FORMATS = ("specbench",)
ANSWERS = "model_answer"              # the sub-folder Spec-Bench's evaluation reads


class ExportError(SpecvizError):
    """--export names a folder that cannot take this run's answers."""


def check_export_dir(out_dir: Path | str, replace: bool) -> Path:
    """DIR for `--export specbench DIR`, checked before any work: writable (or creatable, not
    under a file or /proc), its model_answer/ a folder, and holding no .jsonl answers of an
    earlier run unless `replace` (--overwrite, or --resume: the export is of the whole run)."""
    folder = check_output_dir(str(out_dir), "--export")
    answers = folder / ANSWERS
    if answers.exists() or answers.is_symlink():
        check_output_dir(str(answers), "--export")
        earlier = sorted(p.name for p in answers.glob("*.jsonl"))
        if earlier and not replace:
            shown = ", ".join(earlier[:3]) + (f" and {len(earlier) - 3} more" if len(earlier) > 3 else "")
            raise ExportError(f"--export: {str(answers)!r} already holds answers ({shown}); add --overwrite "
                              "to replace them, or choose another export folder")
    return folder


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


def answer_records(runs: Sequence[Run], method: str, model_id: str, tokenizer: PreTrainedTokenizerBase,
                   tstamp: float | None = None) -> list[dict[str, Any]]:
    """One Spec-Bench answer record per question that `method` answered (Spec-Bench's answers are one
    request at a time: a run with batch sizes keeps its smallest batch size's turns)."""
    by_question: dict[int, dict[int, list[Run]]] = defaultdict(lambda: defaultdict(list))
    category: dict[int, str] = {}
    smallest = min((r.batch_size for r in runs), default=1)
    for run in runs:
        if run.method == method and run.batch_size == smallest:
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
                     dtype: str, tokenizer: PreTrainedTokenizerBase) -> list[Path]:
    """Write DIR/model_answer/<model_id>.jsonl for every method; returns the files."""
    folder = Path(out_dir) / ANSWERS
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for method in methods:
        model_id = model_id_of(model, method, dtype)
        records = answer_records(runs, method, model_id, tokenizer)
        if not records:
            continue
        path = folder / f"{model_id}.jsonl"
        write_text_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), "--export")
        files.append(path)
    return files
