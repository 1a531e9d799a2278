"""Re-record the run the explorer opens on, with the machine's cost model beside it.

    python scripts/record_landing.py                 # on a quiet machine: about a minute on 2 CPU cores
    python scripts/record_landing.py --note "..."    # a note the page shows (e.g. a busy machine)

Writes specviz/data/traces/landing.json (ngram_trie with the paper's untrimmed trees,
size_by_cost=false, on the embedded SmolLM2-135M, summarising the worked example
"Summarization: the village bakery", greedy, 128 new tokens) and beside it
landing.recording.json: when, where (CPU, cores, torch threads, versions) and how (this
command) it was recorded, and the machine's cost model measured right after the run: the
seconds of one verify forward for each row count the run used, over a cache as long as the
run's middle (the median of CALIBRATIONS calibrations, as `specviz doctor` measures them).

A recording whose per-step forward times disagree with that cost model by more than
landing_check.STEP_FACTOR (the machine was busy: another process took the CPU during some
steps) is recorded again, up to --tries times; if none agrees, the last is written with a
note saying so, and tests/test_viz.py's consistency test fails until it is re-recorded.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRESET = "Summarization: the village bakery"
MESSAGE = "Summarise the text above in three sentences."
DRAFTER, SETTINGS, MAX_NEW_TOKENS = "ngram_trie", {"size_by_cost": False}, 128
CALIBRATIONS = 3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "specviz" / "data" / "traces" / "landing.json")
    ap.add_argument("--tries", type=int, default=3, help="recordings at most, until one agrees with its cost model")
    ap.add_argument("--note", default="", help="a note shown with the run (e.g. 'a busy machine')")
    args = ap.parse_args(argv)

    import torch
    import transformers

    from specviz.bench.cluster import cpu_model
    from specviz.models.cost import calibrate
    from specviz.core.decoding import DecodingConfig
    from specviz.engine import generate
    from specviz.analysis.landing_check import cost_model_disagreements, forward_rows
    from specviz.models import load_model
    from specviz.models.prompts import build_prompt
    from specviz.ui.presets import load_presets

    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    preset = next(p for p in load_presets() if p.name == PRESET)
    lm = load_model("embedded")
    prompt = build_prompt(lm.tokenizer, MESSAGE, context=preset.context)
    decoding = DecodingConfig(max_new_tokens=MAX_NEW_TOKENS)
    for attempt in range(1, args.tries + 1):
        trace = generate(lm, prompt, DRAFTER, dict(SETTINGS), decoding)
        rows = sorted({forward_rows(s) for s in trace.steps})
        past = len(trace.prompt_ids) + len(trace.output_ids) // 2     # the run's middle
        runs = [calibrate(lm.model, past_len=past, sizes=tuple(rows), repeats=1) for _ in range(CALIBRATIONS)]
        seconds = [statistics.median(r.seconds[i] for r in runs) for i in range(len(rows))]
        cost = {"past_len": past, "rows": rows, "seconds": seconds}
        bad = cost_model_disagreements(trace, cost)
        print(f"recording {attempt}: {len(trace.steps)} steps, {len(trace.output_ids)} tokens, "
              f"{len(bad)} step(s) off the cost model", file=sys.stderr)
        if not bad:
            break
    note = args.note
    if bad:
        note = (note + "; " if note else "") + f"{len(bad)} step(s) disagree with the cost model (a busy machine)"
    recording = {
        "recorded": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python scripts/record_landing.py" + (f" --note {json.dumps(args.note)}" if args.note else ""),
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "device": trace.device, "dtype": trace.dtype, "torch": torch.__version__,
                    "transformers": transformers.__version__, "python": platform.python_version(),
                    # 1-minute load averages before and after: above the core count, others shared the CPU
                    "load_average": [load_before, os.getloadavg()[0] if hasattr(os, "getloadavg") else None],
                    "tries": attempt},
        "run": {"model": trace.model_id, "drafter": DRAFTER, "settings": SETTINGS, "preset": PRESET,
                "message": MESSAGE, "max_new_tokens": MAX_NEW_TOKENS},
        "cost_model": cost,
        "note": note,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(trace.to_json(), encoding="utf-8")
    args.out.with_name(args.out.stem + ".recording.json").write_text(json.dumps(recording, indent=1) + "\n",
                                                                     encoding="utf-8")
    print(f"wrote {args.out} and its .recording.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
