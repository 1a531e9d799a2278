"""Spec-Bench question files: one JSON record per line, {question_id, category, turns}.

Spec-Bench's 480 questions ship with the package (specviz/data/specbench/question.jsonl,
Apache-2.0: its LICENSE beside it, credit in NOTICE) and are the default. Categories: the 8 MT-bench ones (writing, roleplay, reasoning, math,
coding, extraction, stem, humanities; two turns each), translation, summarization, qa,
math_reasoning, rag. `mt_bench` names the 8 MT-bench categories together.

A last line cut off mid-record (a download or copy that stopped early) is skipped with a
warning; a malformed line anywhere else is an error naming the line.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecvizError
from ..files.resources import data_path
from ..files.user_files import loads_json, read_text_file
from ..files.user_values import ascii_int, shown

MT_BENCH = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
DEFAULT_QUESTIONS = data_path("specbench", "question.jsonl")
QUESTIONS_LIMIT_BYTES = 50_000_000     # Spec-Bench's question.jsonl is 0.7 MB


class QuestionsError(SpecvizError):
    """A questions file is missing or malformed, or a category is unknown."""


@dataclass(frozen=True)
class Question:
    question_id: int
    category: str
    turns: tuple[str, ...]


def _parse(line: str, where: str) -> Question:
    q = loads_json(line, f"questions: {where}", error=QuestionsError, hint="give a Spec-Bench record")
    try:
        turns, qid = q["turns"], q["question_id"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise ValueError("'turns' must be a non-empty list of non-empty strings")
        number = qid if isinstance(qid, int) and not isinstance(qid, bool) else ascii_int(qid, signed=True)
        if number is None:              # "٣" passed isdigit(); ASCII digits only (files/user_values.py)
            raise ValueError(f"'question_id' must be a whole number, got {shown(qid)}")
        return Question(number, str(q["category"]), tuple(turns))
    except (KeyError, TypeError, ValueError) as err:
        raise QuestionsError(f"questions: {where} is not a Spec-Bench record ({err})") from None


def read_questions(path: Path) -> tuple[list[Question], list[str]]:
    """Every record of the file, and warnings (a truncated last line is skipped). Question ids
    must be unique: the bench's results and --resume know a question by its id."""
    text = read_text_file(str(path), "questions", QUESTIONS_LIMIT_BYTES, QuestionsError,
                          missing="give --questions PATH to a Spec-Bench question.jsonl")
    lines = [(i, line) for i, line in enumerate(text.splitlines(), start=1) if line.strip()]
    out: list[Question] = []
    warnings: list[str] = []
    seen: dict[int, int] = {}
    for k, (number, line) in enumerate(lines):
        try:
            question = _parse(line, f"{path.name} line {number}")
        except QuestionsError:
            if k == len(lines) - 1 and not text.endswith("\n") and out:
                warnings.append(f"questions: {path.name} line {number}, the last, is cut off mid-record; skipped it")
                continue
            raise
        if question.question_id in seen:
            raise QuestionsError(f"questions: {path.name} line {number} has question_id {question.question_id}, "
                                 f"as line {seen[question.question_id]} has; give each question its own id")
        seen[question.question_id] = number
        out.append(question)
    if not out:
        raise QuestionsError(f"questions: {str(path)!r} holds no questions")
    return out, warnings


def expand_categories(names: list[str], known: set[str]) -> list[str]:
    """'mt_bench' -> its 8 categories; 'all' -> every category of the file; checks the rest."""
    out: list[str] = []
    for name in names:
        if name == "all":
            out += sorted(known)
        elif name == "mt_bench":
            out += [c for c in MT_BENCH if c in known]
        elif name in known:
            out.append(name)
        else:
            raise QuestionsError(f"categories: unknown category {name!r}; this file has "
                                 f"{', '.join(sorted(known))} (or mt_bench, all)")
    return list(dict.fromkeys(out))


def select(questions: list[Question], categories: list[str], limit: int) -> list[Question]:
    """The first `limit` questions of each category, dealt round-robin (the first of each
    category in the order given, then the second of each, ...), so that drift of the machine
    and an interrupted run hit every category alike."""
    cats = expand_categories(categories, {q.category for q in questions})
    per_cat = [[q for q in questions if q.category == c][:limit] for c in cats]
    return [qs[i] for i in range(max(map(len, per_cat), default=0)) for qs in per_cat if i < len(qs)]
