"""Where specviz keeps what it makes once and reuses: converted models, fetched files, indexes.

SPECVIZ_CACHE if set, else ~/.cache/specviz. `publish_folder` puts a folder there whole or not
at all, for several processes starting at once (a Space's workers, parallel test workers): each
fills a folder of its own and renames it into place; a reader sees no half-written one. A leaf
module: anything may import it.
"""
from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

DONE = "DONE"          # the mark of a finished folder (its text: what it was made from)


def cache_dir() -> Path:
    return Path(os.environ.get("SPECVIZ_CACHE", Path.home() / ".cache" / "specviz"))


def finished(folder: Path) -> bool:
    return (folder / DONE).is_file()


def publish_folder(folder: Path, fill: Callable[[Path], object], made_from: str) -> None:
    """Make `folder` by `fill(tmp)` (its result unused) in a temporary sibling, marked DONE, then renamed into place.
    An unfinished `folder` (no DONE: a crash of an older specviz) is replaced; a finished one that
    another process published meanwhile is kept and this copy dropped. OSError (a read-only or
    full disk) reaches the caller, who may go on without the cache."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.parent / f".{folder.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
    tmp.mkdir()                             # the umask's mode, as a plain mkdir gives (mkdtemp: 0700)
    try:
        fill(tmp)
        (tmp / DONE).write_text(made_from)
        if folder.exists() and not finished(folder):
            shutil.rmtree(folder, ignore_errors=True)
        try:
            os.rename(tmp, folder)
        except OSError:
            if not finished(folder):     # not a race lost to a finished copy: a real failure
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
