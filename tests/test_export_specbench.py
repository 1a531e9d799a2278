"""`bench --export specbench DIR`: Spec-Bench's own answer files.

The field names are those Spec-Bench's evaluation/eval.py writes (hemingkx/Spec-Bench):
{question_id, category, answer_id, model_id, choices: [{index, turns, decoding_steps, new_tokens,
wall_time, accept_lengths}], tstamp}, in data/<bench>/model_answer/<model_id>.jsonl. `speed_py`
below is its evaluation/speed.py `speed()` cut to what it computes (tokens/s per question, the
speedup over the baseline file, the mean accepted tokens), run on the export.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from specviz.bench.export_specbench import answer_records, model_id_of
from specviz.bench.metrics import Run
from specviz.cli import main

RECORD_FIELDS = {"question_id", "category", "answer_id", "model_id", "choices", "tstamp"}
CHOICE_FIELDS = {"index", "turns", "decoding_steps", "new_tokens", "wall_time", "accept_lengths"}


def speed_py(jsonl_file: Path, jsonl_file_base: Path, tokenizer, task: str = "overall") -> tuple[float, float, float, list]:
    """Spec-Bench evaluation/speed.py speed(), without the printing."""
    def read(path: Path) -> list[dict]:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return [r for r in rows if task == "overall" or r["category"] == task]

    speeds, accept_lengths_list = [], []
    for datapoint in read(jsonl_file):
        tokens = sum(datapoint["choices"][0]["new_tokens"])
        times = sum(datapoint["choices"][0]["wall_time"])
        accept_lengths_list.extend(datapoint["choices"][0]["accept_lengths"])
        speeds.append(tokens / times)
    speeds0 = []
    for datapoint in read(jsonl_file_base):
        tokens = sum(len(tokenizer(t).input_ids) - 1 for t in datapoint["choices"][0]["turns"])
        speeds0.append(tokens / sum(datapoint["choices"][0]["wall_time"]))
    return (float(np.mean(speeds)), float(np.mean(speeds0)), float(np.mean(speeds) / np.mean(speeds0)),
            accept_lengths_list)


def test_model_id_follows_spec_bench_naming() -> None:
    assert model_id_of("embedded", "vanilla", "float32") == "embedded-vanilla-float32-temp-0.0"
    assert model_id_of("HuggingFaceTB/SmolLM2-135M", "ngram_trie[num_draft=8;prefix_len=2]", "bfloat16") \
        == "SmolLM2-135M-ngram_trie_num_draft=8_prefix_len=2-bfloat16-temp-0.0"


def test_records_have_spec_bench_fields(tiny_lm_tok) -> None:
    tok = tiny_lm_tok.tokenizer
    hello, world = tok(" Hello there")["input_ids"], tok(" world")["input_ids"]
    runs = [Run(7, "writing", 1, "ngram_trie", 0, len(world), 0.5, 1, (len(world),), output_ids=tuple(world)),
            Run(7, "writing", 0, "ngram_trie", 0, len(hello), 1.0, 2, (1, len(hello) - 1), output_ids=tuple(hello)),
            Run(3, "qa", 0, "ngram_trie", 0, 4, 0.25, 3, (2, 1, 1)),
            Run(3, "qa", 0, "hf_prompt_lookup", 0, 4, 0.2, None),
            Run(3, "qa", 0, "hf_greedy", 0, 4, 0.3, None)]
    records = answer_records(runs, "ngram_trie", "m-ngram_trie-float32-temp-0.0", tok, tstamp=1.0)
    assert [r["question_id"] for r in records] == [3, 7]                   # sorted, one line per question
    for r in records:
        assert set(r) == RECORD_FIELDS and r["model_id"] == "m-ngram_trie-float32-temp-0.0"
        assert all(set(c) == CHOICE_FIELDS for c in r["choices"])
    two_turns = records[1]["choices"][0]
    assert two_turns == {"index": 0, "turns": ["Hello there", "world"], "decoding_steps": [2, 1],
                         "new_tokens": [len(hello), len(world)], "wall_time": [1.0, 0.5],
                         "accept_lengths": [1, len(hello) - 1, len(world)]}
    peer = answer_records(runs, "hf_prompt_lookup", "x", tok)[0]["choices"][0]
    assert peer["decoding_steps"] == [None] and peer["accept_lengths"] == []          # steps not reported
    greedy = answer_records(runs, "hf_greedy", "x", tok)[0]["choices"][0]
    assert greedy["decoding_steps"] == [4] and greedy["accept_lengths"] == [1, 1, 1, 1]


def test_bench_export_is_read_by_spec_bench_speed(tiny_lm_tok, tmp_path: Path, capsys) -> None:
    out, export = tmp_path / "run", tmp_path / "specbench"
    code = main(["bench", "--model", "tiny-random", "--device", "cpu", "--dtype", "float32",
                 "--drafters", "vanilla,prompt_lookup[max_ngram=2]", "--peers", "", "--categories", "writing,qa",
                 "--limit", "1", "--warmup", "0", "--max-new-tokens", "12", "--out", str(out),
                 "--export", "specbench", str(export)])
    assert code == 0, capsys.readouterr().err
    files = sorted(p.name for p in (export / "model_answer").iterdir())
    assert files == ["tiny-random-prompt_lookup_max_ngram=2-float32-temp-0.0.jsonl",
                     "tiny-random-vanilla-float32-temp-0.0.jsonl"]
    base = export / "model_answer" / files[1]
    method = export / "model_answer" / files[0]
    for path in (base, method):
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        assert {r["category"] for r in lines} == {"writing", "qa"}
        writing = [r for r in lines if r["category"] == "writing"][0]
        assert len(writing["choices"][0]["turns"]) == 2                    # MT-bench: two turns
    tps, tps_base, speedup, accepted = speed_py(method, base, tiny_lm_tok.tokenizer)
    assert tps > 0 and tps_base > 0 and speedup > 0 and all(n >= 1 for n in accepted)
    # the export holds what results.json measured
    runs = json.loads((out / "results.json").read_text())["runs"]
    vanilla = [json.loads(line) for line in base.read_text().splitlines()]
    assert sum(sum(r["choices"][0]["new_tokens"]) for r in vanilla) == \
        sum(r["new_tokens"] for r in runs if r["method"] == "vanilla")


def test_export_format_is_checked_before_loading(tmp_path: Path, capsys) -> None:
    code = main(["bench", "--model", "no-such-model-anywhere", "--export", "vllm", str(tmp_path)])
    assert code == 2 and "--export: unknown format 'vllm'; known: specbench" in capsys.readouterr().err
