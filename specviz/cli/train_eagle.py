"""`python -m specviz train-eagle --kind eagle,eagle3,mtp`: train EAGLE (EAGLE-1/-2) and EAGLE-3 draft
heads for a frozen target as the authors train them, and an MTP module (DeepSeek-V3's, for a target
that has none); resumable (a kind new to a run starts fresh beside the others); a held-out curve as it goes.

The training itself is the library: specviz/eagle/train.py (EAGLE's and EAGLE-3's heads and losses),
specviz/mtp/train.py (MTP's) in netkit/recipe.train_online (the loop: one target pass per batch
shared by every head). This module
reads the flags and the data (netkit/data.py: ShareGPT, `specviz distill`'s .jsonl or texts, with
the target's chat template and the loss on the assistant turns; several sources taken in turn
by --data-weights), sizes the draft vocabulary by its measured coverage of the target's choices,
and writes the run folder --out:

    OUT/run.json      where the run is (steps, tokens, batches per source, the coverage curve)
    OUT/curve.csv     held-out top-1 per draft position (teacher-forced, chained) against tokens
    OUT/vocab.pt      the draft vocabulary (target ids, most frequent first)
    OUT/<kind>/       each head: config.json + model.safetensors (authors' layout; mtp: specviz's MTP
                      layout, DeepSeek's names) + training.pt

--export DIR writes fp16 copies without the training state as DIR/<kind>-<model>/ (the names
specviz/data/checkpoints/ ships) after training; with --export-only, from the run's last save
without training or writing to --out (safe while the run goes on), with a model card per head
(DIR/<kind>-<model>.md, netkit/card.py). --device cuda with --target-dtype bfloat16 is the GPU path.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, TypeVar

from ..errors import ConfigError
from ..mtp import KIND as MTP          # the MTP module, a kind beside EAGLE's (mtp/train.py)
from .errors import UsageError
from .training import (Held, add_batch_arguments, add_resume_arguments, add_seed_arguments, add_source_arguments,
                       check_apart, check_fresh_export, check_fresh_out, check_run_flags, config_from,
                       eagle_folder, folder_checkpoint, needs_tokenizer, set_threads)

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from ..eagle.model import EagleDraft
    from ..mtp.train import MTPTrainConfig

T = TypeVar("T")

RUN_FILES = {"run.json", "run.tmp", "curve.csv", "curve.tmp", "vocab.pt", "vocab.tmp", "train.log"}
EXPORT_MAP = 32768                 # --export-only: FR-Spec's freq_K.pt beside an EAGLE / MTP head, from vocab.pt
VOCAB_WINDOWS = 4096               # training windows (per source) whose assistant tokens rank the draft vocabulary


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..eagle.model import KINDS
    from ..eagle.train import EagleTrainConfig

    from ..mtp.train import MTPTrainConfig

    d, m = EagleTrainConfig(), MTPTrainConfig()
    p.add_argument("--kind", default=d.kind, metavar="|".join((*KINDS, MTP)) + "|" + ",".join((*KINDS, MTP)),
                   help="the heads to train, side by side on one target pass per batch (default: eagle3); "
                        "with --resume, a kind new to the run starts fresh beside the others")
    add_source_arguments(p, "the run's folder: run.json, curve.csv, vocab.pt and one folder per head "
                            "(default: train-eagle/<model> in the specviz cache)")
    p.add_argument("--data-weights", default=None, metavar="W1,W2",
                   help="with several --data sources (comma-separated): batches of each taken in turn (default 1 each)")
    p.add_argument("--vocab", type=int, default=d.vocab, metavar="K",
                   help="the draft vocabulary (EAGLE-3's lm_head; EAGLE's loss): the K most frequent assistant "
                        "tokens of the data; 0 (default): the smallest size whose coverage of the target's own "
                        "choices on the held-out data reaches --coverage")
    p.add_argument("--coverage", type=float, default=d.coverage,
                   help="--vocab 0: the share of the target's choices the draft vocabulary must hold")
    p.add_argument("--intermediate", type=int, default=d.intermediate,
                   help="the head's MLP width (0: the target's, as the authors)")
    p.add_argument("--ttt", type=int, default=d.ttt, help="eagle3: training-time-test steps (authors: 7)")
    p.add_argument("--positions", type=int, default=d.positions, help="held-out: draft positions evaluated")
    p.add_argument("--mtp-unroll", type=int, default=m.unroll, metavar="N",
                   help="mtp: steps of the one module on its own output per training row (vLLM reuses it for "
                        "num_speculative_tokens steps; 1: DeepSeek-V3's objective alone)")
    p.add_argument("--mtp-positions", type=int, default=m.positions, metavar="N",
                   help="mtp: held-out draft positions evaluated (its logits run over the whole vocabulary)")
    p.add_argument("--mtp-steps", type=int, default=m.steps, metavar="N",
                   help="mtp: its own optimiser steps, fewer than the run's (0: to the run's end); its schedule "
                        "runs over them from the step it joined at")
    p.add_argument("--steps", type=int, default=d.steps, help="optimiser steps (the schedule's length)")
    add_batch_arguments(p, d)
    p.add_argument("--held-out", type=int, default=16, metavar="K",
                   help="held-out windows per data source, from its fixed held-out split (1%% of conversations "
                        "by id), evaluated at the start, every --eval-every steps and at the end")
    p.add_argument("--eval-every", type=int, default=0, metavar="N", help="evaluate every N steps (0: start and end)")
    p.add_argument("--save-every", type=int, default=d.save_every, metavar="N", help="save every N steps")
    p.add_argument("--save-minutes", type=float, default=15.0, help="and every this many minutes")
    add_resume_arguments(p, export="DIR")
    p.add_argument("--export-only", action="store_true",
                   help="with --export DIR: write the fp16 heads of --out's last save and their model cards "
                        "(DIR/<kind>-<model>.md) without training and without writing to --out")
    p.add_argument("--export-vocab", type=int, default=0, metavar="K",
                   help="with --export-only: export the EAGLE-3 head with only the K most frequent tokens of its "
                        "draft vocabulary (the run's vocab.pt order; the rest of the head unchanged): a cheaper "
                        "draft where K still holds most of the target's choices (the card gives the coverage)")
    p.add_argument("--target-dtype", default="float32", choices=("float32", "bfloat16"),
                   help="the target's pass: float32, or its decoder under bfloat16 autocast (features kept "
                        "and its logits taken in fp32)")
    add_seed_arguments(p, d)


def run_folder(path: Path) -> Held:
    """check_fresh's `held` for a train-eagle run folder: run.json and only what a run writes
    ("run"); a head's --export copy ("export"); anything else is "other"."""
    from ..eagle.model import KINDS

    names = {p.name for p in path.iterdir()}
    if "run.json" not in names or not names <= RUN_FILES | set(KINDS) | {MTP}:
        head = eagle_folder(path)                   # a head's folder: an --export copy is named as one
        return "export" if head == "export" else "other"
    return "run"


def kinds_of(text: str) -> list[str]:
    from ..eagle.model import KINDS

    kinds = [k.strip() for k in str(text).split(",") if k.strip()]
    known = (*KINDS, MTP)
    bad = [k for k in kinds if k not in known]
    if not kinds or bad or len(set(kinds)) != len(kinds):
        raise UsageError(f"--kind: give one or more of {', '.join(known)}, comma-separated, each once; got {text!r}")
    return kinds


def sources_of(args: argparse.Namespace) -> tuple[list[str], list[int]]:
    sources = [s.strip() for s in str(args.data).split(",") if s.strip()]
    if not sources:
        raise UsageError("--data: give 'sharegpt' or a file, or several, comma-separated")
    if args.data_weights is None:
        return sources, [1] * len(sources)
    try:
        weights = [int(w) for w in str(args.data_weights).split(",")]
    except ValueError:
        weights = []
    if len(weights) != len(sources) or any(not 1 <= w <= 1000 for w in weights):
        raise UsageError(f"--data-weights: give {len(sources)} whole numbers from 1 to 1000, comma-separated "
                         f"(one per --data source); got {args.data_weights!r}")
    return sources, weights


def export_folder(export: Path, kind: str, model: str) -> Path:
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in model)
    return export / f"{kind}-{slug}"


def head_folder(path: Path) -> Held:
    """check_fresh's `held` for a head's folder that train-eagle writes: an EAGLE / EAGLE-3 one
    (eagle_folder) or an MTP module in specviz's layout (its files only, config.json naming
    specviz's MTP format), with training.pt ("run") or without it ("export"); else "other"."""
    from ..mtp import checkpoint as mtp_ckpt

    held = eagle_folder(path)
    return held if held != "other" else folder_checkpoint(path, mtp_ckpt)


def check_flags(args: argparse.Namespace, cfgs: list[Any], kinds: list[str], out: Path) -> None:
    """Every flag and output checked before the target loads."""
    from ..files.user_files import check_output_dir

    for cfg in cfgs:
        cfg.check()
    check_run_flags(args)
    for name, low in (("--eval-every", 0), ("--save-every", 1)):
        if getattr(args, name[2:].replace("-", "_")) < low:
            raise UsageError(f"{name}: must be >= {low}, got {getattr(args, name[2:].replace('-', '_'))}")
    if not 0 < args.save_minutes < 1e6:
        raise ConfigError("save_minutes", f"must be a positive number of minutes below 1e6, got {args.save_minutes}")
    check_output_dir(str(out), "--out")
    from ..eagle.model import OWN_VOCAB_KINDS

    if args.export_vocab and not (args.export_only and set(kinds) & set(OWN_VOCAB_KINDS)):
        raise UsageError("--export-vocab: cuts an EAGLE-3 head's draft vocabulary when exporting a run's last save; "
                         "give it with --export-only and --kind eagle3")
    if args.export_vocab < 0:
        raise UsageError(f"--export-vocab: must be a positive number of tokens (0: the head's own), got {args.export_vocab}")
    if args.export_only:
        if not args.export:
            raise UsageError("--export-only: give --export DIR, where the heads and their cards go")
        if args.resume:
            raise UsageError("--export-only: reads --out's last save without training; drop --resume")
        if not (out / "run.json").is_file():
            raise UsageError(f"--export-only: no train-eagle run at {str(out)!r} (no run.json) to export from")
    else:
        check_fresh_out(out, run_folder, "a train-eagle run's", True, args.resume, args.overwrite)
    if args.export:
        export = Path(args.export).expanduser()
        check_output_dir(str(export), "--export")
        for kind in kinds:
            folder = export_folder(export, kind, args.model)
            check_apart(out, folder, True)
            check_fresh_export(folder, head_folder, "a train-eagle head", True, args.resume, args.overwrite)


def run(args: argparse.Namespace) -> int:
    import torch

    from ..eagle.train import (EagleHead, EagleTrainConfig, check_sizes, coverage_curve, frequent_ids, kind_configs,
                               vocab_for)
    from ..files.cachedir import cache_dir
    from ..models import load_model
    from ..mtp.train import MTPTrainConfig, MTPTrainHead
    from ..netkit.data import DataError, masked_batches, mixed_batches, split_windows, token_counts
    from ..netkit.recipe import OnlineSchedule, RunState, freeze_target, train_online
    from ..netkit.target_pass import feature_pass

    kinds = kinds_of(args.kind)
    eagle_kinds = [k for k in kinds if k != MTP]
    base = config_from(EagleTrainConfig, args, kind=(eagle_kinds or [EagleTrainConfig().kind])[0])
    cfgs: list[Any] = kind_configs(base, eagle_kinds)
    mtp_cfg = MTPTrainConfig(unroll=args.mtp_unroll, positions=args.mtp_positions, steps=args.mtp_steps,
                             lr=base.lr, seq_len=base.seq_len)
    sources, weights = sources_of(args)
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in args.model)
    out = Path(args.out).expanduser() if args.out else cache_dir() / "train-eagle" / slug
    check_flags(args, [base, *cfgs, *([mtp_cfg] if MTP in kinds else [])], kinds, out)
    set_threads(args.threads)
    lm = load_model(args.model, device=args.device, dtype="float32", cpu_linear=False)
    needs_tokenizer(lm, args.model)
    target, tok = lm.model, lm.tokenizer
    for cfg in cfgs:
        check_sizes(cfg, target)
    freeze_target(target, base.seed)
    if args.export_only:
        return export_only(args, kinds, out, target, lm.model_id, cfgs, mtp_cfg)
    autocast = torch.bfloat16 if args.target_dtype == "bfloat16" else None
    vocab_size = int(target.get_input_embeddings().weight.shape[0])
    device = lm.device

    # the held-out windows of each source's fixed split, the target's pass over them made once
    held: dict[str, list[Any]] = {}
    if args.held_out:
        from ..eagle.train import pass_layers
        for src in sources:
            rows = list(masked_batches(split_windows(src, tok, base.seq_len, True, args.max_texts), 1))[:args.held_out]
            if not rows:
                raise DataError(f"data: {src}: its held-out split (1% of conversations, by id) gives no window of "
                                f"{base.seq_len} tokens for --held-out {args.held_out}; give more data or --held-out 0")
            held[src] = [(ids.to(device), mask.to(device), feature_pass(target, ids.to(device), pass_layers(target),
                                                                        autocast)) for ids, mask in rows]
    state = RunState.read(out / "run.json") if args.resume else RunState()
    if args.overwrite and out.is_dir():
        for name in RUN_FILES:
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)

    # the draft vocabulary: the data's most frequent assistant tokens, sized by coverage
    vocab_file = out / "vocab.pt"
    if args.resume:
        order = _read_vocab(vocab_file, vocab_size)
        k = int(state.notes.get("draft_vocab", 0))
        if not 0 < k <= len(order):
            raise UsageError(f"--resume: {str(out / 'run.json')!r} records no draft vocabulary size; start a new --out")
    else:
        wins = (w for src in sources for w in _take(split_windows(src, tok, base.seq_len, False, args.max_texts),
                                                    VOCAB_WINDOWS))
        counts = token_counts(wins, vocab_size)
        order = frequent_ids(counts)
        labels = torch.cat([fp.labels[:, 1:][m[:, 1:]].cpu() for rows in held.values() for _, m, fp in rows]) \
            if held else torch.zeros(0, dtype=torch.long)
        curve = coverage_curve(order, labels) if len(labels) else {}
        k = base.vocab or (vocab_for(curve, base.coverage, vocab_size) if curve else min(8192, vocab_size))
        k = min(k, vocab_size)
        state.notes.update({"draft_vocab": k, "coverage_curve": {str(a): b for a, b in curve.items()},
                            "coverage_of": f"the target's choices on {len(labels)} held-out tokens in the loss",
                            "vocab_counted_windows": VOCAB_WINDOWS * len(sources), "sources": sources,
                            "weights": weights, "target_dtype": args.target_dtype, "device": str(device)})
        if curve:
            print("draft vocabulary coverage of the target's choices (held-out): "
                  + ", ".join(f"{a}: {b:.4f}" for a, b in curve.items()) + f"; chosen {k}", flush=True)
        tmp = out / "vocab.tmp"
        torch.save(order.clone(), tmp)
        tmp.replace(vocab_file)
    vocab = order[:k].to(device)

    # a kind is continued when the run holds it (its folder or its counters), else it starts fresh
    # beside the others (a kind new to the run: its own counters from 0, joining at the step reached)
    def continued(kind: str) -> bool:
        return args.resume and ((out / kind).exists() or kind in state.heads)

    heads: list[Any] = []
    for kind in kinds:
        if kind == MTP:
            heads.append(MTPTrainHead(target, lm.model_id, mtp_cfg, out / MTP, continued(MTP), data_name=args.data))
        else:
            cfg = next(c for c in cfgs if c.kind == kind)
            heads.append(EagleHead(target, lm.model_id, cfg, vocab, out / kind, continued(kind), data_name=args.data))
    for head in heads:
        resumed = continued(head.name)
        progress = state.progress(head.name, resumed=resumed)
        if resumed:
            done = int(torch.load(out / head.name / "training.pt", map_location="cpu", weights_only=True)["step"])
            if done != progress.step:
                raise UsageError(f"--resume: the head in {str(out / head.name)!r} is at step {done}, the run records "
                                 f"{progress.step} for it; start a new --out")
        elif args.resume:
            print(f"{head.name}: new to the run, starts fresh at the run's step {state.step}", flush=True)
    batches = mixed_batches(sources, weights, tok, base.seq_len, base.batch, skip=state.batches,
                            max_records=args.max_texts)
    schedule = OnlineSchedule(steps=base.steps, lr=base.lr, warmup=base.warmup, eval_every=args.eval_every,
                              save_every=args.save_every, save_minutes=args.save_minutes)
    state = train_online(target, heads, batches, held, schedule, state, out, vocab, autocast,
                         log=lambda line: print(line, flush=True))
    if args.export:
        for head in heads:
            folder = export_folder(Path(args.export).expanduser(), head.name, args.model)
            head.export(folder, state.heads[head.name])
            write_token_map(folder, head.name, out, target, "--export")
    print(f"saved {out}: {', '.join(kinds)} after {state.step} steps, {state.tokens} tokens"
          + "".join(f"; {h.name} held-out top-1 per draft position: " + ", ".join(f"{a:.3f}" for a in h.held_out["top1"])
                    for h in heads if h.held_out))
    return 0


def export_only(args: argparse.Namespace, kinds: list[str], out: Path, target: PreTrainedModel, target_id: str,
                cfgs: list[Any], mtp_cfg: MTPTrainConfig) -> int:
    """--export-only: each head of `kinds` as --out's last save holds it, in fp16 without its
    training state, into --export as <kind>-<model>/, and its model card <kind>-<model>.md
    (netkit/card.py: run.json, curve.csv, the data). Reads --out only (safe while a run writes it:
    every file there is replaced whole)."""
    from ..eagle import checkpoint as ckpt
    from ..eagle.model import OWN_VOCAB_KINDS
    from ..mtp import checkpoint as mtp_ckpt
    from ..netkit import card
    from ..netkit.files import CheckpointError
    from ..netkit.recipe import RunState

    state = RunState.read(out / "run.json")
    export = Path(args.export).expanduser()
    for kind in kinds:
        src, folder = out / kind, export_folder(export, kind, args.model)
        try:
            if kind == MTP:
                module, _ = mtp_ckpt.load(str(src), target, target_id)
                extra = mtp_ckpt.read_config(src).get("specviz") or {}
                (folder / "training.pt").unlink(missing_ok=True)
                mtp_ckpt.save(folder, module, extra, None, torch_half())
            else:
                draft = ckpt.load(src, target, target_id, kind)
                extra = ckpt.read_config(src).get("specviz") or {}
                if kind in OWN_VOCAB_KINDS and args.export_vocab:
                    draft, extra = _cut_vocab(draft, extra, out, args.export_vocab, int(target.config.vocab_size))
                (folder / "training.pt").unlink(missing_ok=True)
                ckpt.save(folder, draft, extra, None, torch_half())
        except CheckpointError as err:
            raise UsageError(f"--export-only: {str(src)!r}: {str(err).removeprefix('checkpoint: ')}") from None
        write_token_map(folder, kind, out, target, "--export-only")
        text = card.model_card(kind, args.model, folder, extra, state, out / "curve.csv")
        path = folder.with_name(folder.name + ".md")
        path.write_text(text)
        print(f"{kind}: {extra.get('steps')} steps, {extra.get('tokens')} tokens -> {folder} "
              f"({sum(f.stat().st_size for f in folder.iterdir()) / 2**20:.1f} MiB), card {path}", flush=True)
    return 0


def write_token_map(folder: Path, kind: str, out: Path, target: PreTrainedModel, flag: str) -> None:
    """Beside an exported EAGLE head or MTP module (they draft over the target's whole LM head):
    FR-Spec's freq_K.pt, the first EXPORT_MAP ids of the run's vocab.pt (the ranking `specviz
    token-map` makes from the same windows), the end-of-sequence token kept; EAGLE-3 heads have
    their own draft vocabulary, and a run without vocab.pt writes none."""
    from ..eagle.model import OWN_VOCAB_KINDS
    from ..netkit import token_map

    if kind in OWN_VOCAB_KINDS or not (out / "vocab.pt").is_file():
        return
    order = _read_vocab(out / "vocab.pt", int(target.get_output_embeddings().weight.shape[0]), flag)
    eos = getattr(target.config, "eos_token_id", None)
    eos = eos[0] if isinstance(eos, (list, tuple)) and eos else eos
    token_map.write(folder, token_map.first_of(order, min(EXPORT_MAP, len(order)), eos if isinstance(eos, int) else None))


def _cut_vocab(draft: EagleDraft, extra: dict[str, Any], out: Path, k: int, vocab_size: int
               ) -> tuple[EagleDraft, dict[str, Any]]:
    """--export-vocab K: the EAGLE-3 head with the K most frequent tokens of the run's draft
    vocabulary (vocab.pt's order), and its specviz entry noting the cut."""
    trained = int(draft.spec.draft_vocab)
    if k > trained:
        raise UsageError(f"--export-vocab: {k} is more than the head's draft vocabulary of {trained} tokens; "
                         f"give at most {trained}")
    order = _read_vocab(out / "vocab.pt", vocab_size, "--export-vocab")
    if len(order) < trained or not set(order[:trained].tolist()) == set(draft.draft_ids().tolist()):
        raise UsageError(f"--export-vocab: {str(out / 'vocab.pt')!r} does not rank this head's draft vocabulary; "
                         "export without --export-vocab")
    return draft.with_draft_vocab(order[:k]), {**extra, "draft_vocab_trained": trained, "draft_vocab_exported": k}


def torch_half() -> Any:
    import torch
    return torch.float16


def _take(it: Iterable[T], n: int) -> Iterator[T]:
    import itertools
    return itertools.islice(it, n)


def _read_vocab(path: Path, vocab_size: int, flag: str = "--resume") -> Any:
    import torch

    fix = "start a new --out" if flag == "--resume" else f"export without {flag}"
    try:
        order = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - missing, truncated, not a tensor file: one line
        raise UsageError(f"{flag}: {str(path)!r} cannot be read ({type(err).__name__}); {fix}") from None
    if not isinstance(order, torch.Tensor) or order.dim() != 1 or order.dtype != torch.long or \
            not len(order) or int(order.min()) < 0 or int(order.max()) >= vocab_size:
        raise UsageError(f"{flag}: {str(path)!r} is not a draft vocabulary of this target's tokens; {fix}")
    return order
