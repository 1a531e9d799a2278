"""What a request from the web (the explorer page, its `/trace` API) may make the server read.

A visitor names settings, not files, but some settings are server paths (a GLIDE checkpoint, a
corpus index folder) or model ids (the target, a draft model). Settings declare which with
`setting(kind=...)`, so this module checks every drafter without knowing any by name:

- paths ("file", "folder" settings, and a model id that is a local path) must lie inside the
  shipped data folder (specviz/data) or a folder named in SPECVIZ_ALLOWED_DIRS (separated by
  the OS path separator or commas), links resolved. A folder is checked file by file: every
  symbolic link below it (a config.json, a weight file, a sub-folder) must resolve inside the
  allowed folders too, or the folder is refused before any of its files is read; this is the
  one check every file a web request makes the server open goes through (the drafters and the
  model loader open only files of a path checked here);
- model ids ("model" settings and the target model box) must be listed in
  SPECVIZ_ALLOWED_MODELS (comma-separated) when it is set; unset, any hub id is accepted;
- "checkpoint" settings (EAGLE heads, Medusa heads: a path or a hub id) are checked as a path
  when they name one (or one exists), else as a model id.

The CLI is run by the machine's own user and is not restricted. docs/security.md has the
whole security model.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from ..errors import SpecvizError
from ..files.resources import data_path

ALLOWED_DIRS_ENV = "SPECVIZ_ALLOWED_DIRS"
ALLOWED_MODELS_ENV = "SPECVIZ_ALLOWED_MODELS"


class NotAllowedError(SpecvizError):
    """A web request named a path or model the server does not serve."""


def _split(text: str, seps: str) -> list[str]:
    parts = [text]
    for sep in seps:
        parts = [q for p in parts for q in p.split(sep)]
    return [p.strip() for p in parts if p.strip()]


def allowed_dirs() -> list[Path]:
    """The shipped data folder, then the folders of SPECVIZ_ALLOWED_DIRS (resolved)."""
    extra = _split(os.environ.get(ALLOWED_DIRS_ENV, ""), os.pathsep + ",")
    return [data_path().resolve(), *(Path(d).expanduser().resolve() for d in extra)]


def allowed_models() -> tuple[str, ...] | None:
    """The model ids of SPECVIZ_ALLOWED_MODELS, or None when it is unset or empty (any id)."""
    ids = _split(os.environ.get(ALLOWED_MODELS_ENV, ""), ",")
    return tuple(ids) or None


def _not_allowed(value: str, field: str) -> NotAllowedError:
    """The one refusal for a path outside the allowed folders: the same words whether the path
    exists or not, so a visitor learns nothing about the server's files from it."""
    return NotAllowedError(
        f"{field}: {value!r} is not inside the folders a web request may read (the shipped data folder "
        f"and those in {ALLOWED_DIRS_ENV}); the server's owner can allow more folders with the "
        f"{ALLOWED_DIRS_ENV} environment variable")


MAX_ENTRIES = 20_000                  # files and folders walked below a named folder (a model: ~20)


def _inside(path: Path, roots: list[Path]) -> bool:
    return any(path == root or path.is_relative_to(root) for root in roots)


def check_path(value: str, field: str) -> None:
    """Raise NotAllowedError unless `value` resolves (symlinks followed) inside an allowed folder,
    and, for a folder, every link below it does too (check_links). The answer for a path outside
    does not depend on whether it exists."""
    try:
        path = Path(value).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):     # a symlink loop, a NUL byte, an unknown ~user
        raise _not_allowed(value, field) from None
    roots = allowed_dirs()
    if not _inside(path, roots):
        raise _not_allowed(value, field)
    if path.is_dir():
        check_links(path, value, field, roots)


def check_links(folder: Path, value: str, field: str, roots: list[Path]) -> None:
    """NotAllowedError when a symbolic link below `folder` (an allowed, resolved folder) resolves
    outside the allowed folders, or is broken or a loop: nothing is read through it, it is only
    resolved. Linked folders that stay inside are walked too (each once); more than MAX_ENTRIES
    entries is refused (the work of one request stays bounded)."""
    seen, todo, count = {folder}, [folder], 0
    while todo:
        here = todo.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue                         # unreadable: the reader will say so, nothing leaks here
        for entry in entries:
            count += 1
            if count > MAX_ENTRIES:
                raise NotAllowedError(f"{field}: {value!r} holds more than {MAX_ENTRIES:,} files and folders; name "
                                      "the checkpoint, index or model folder itself")
            if entry.is_symlink():
                try:
                    target = Path(entry.path).resolve(strict=True)
                except (OSError, RuntimeError):
                    target = None
                if target is None or not _inside(target, roots):
                    shown = os.path.relpath(entry.path, folder)
                    raise NotAllowedError(
                        f"{field}: {value!r} holds {shown!r}, a link that leads outside the folders a web request "
                        f"may read (or nowhere); it is not read. The server's owner can allow the folder it "
                        f"leads to with {ALLOWED_DIRS_ENV}")
                if target.is_dir() and target not in seen:
                    seen.add(target)
                    todo.append(target)
            elif entry.is_dir(follow_symlinks=False):
                todo.append(Path(entry.path))


def looks_like_path(model_id: str) -> bool:
    """A model box entry that can only be a local path, never a hub id ('org/name'): absolute,
    ~ or . first, a backslash, or more than one '/'."""
    text = model_id.strip()
    return (text.startswith(("/", "~", ".")) or "\\" in text or text.count("/") > 1
            or Path(text).is_absolute())


def check_model(model_id: str, field: str) -> None:
    """Raise NotAllowedError for a model id that is not allowed (or a local path outside the folders)."""
    model_id = (model_id or "").strip()
    allowed = allowed_models()
    if allowed is not None and model_id not in allowed:
        raise NotAllowedError(f"{field}: {model_id!r} is not served here; allowed: {', '.join(allowed)} "
                              f"(set by the server's {ALLOWED_MODELS_ENV})")
    if model_id and (looks_like_path(model_id) or _exists(model_id)):
        check_path(model_id, field)      # a path is checked whether it exists or not: one message


def check_checkpoint(value: str, field: str) -> None:
    """Trained weights named by a server path (by its shape, or because it exists: checked as a
    path, whatever SPECVIZ_ALLOWED_MODELS says) or by a model-hub id (checked as a model id)."""
    if looks_like_path(value) or _exists(value):
        check_path(value, field)
    else:
        check_model(value, field)


def _exists(model_id: str) -> bool:
    try:
        return Path(model_id).expanduser().exists()
    except (OSError, RuntimeError, ValueError):
        return True                      # unreadable as a path: checked as one (and refused)


def check_request(model_id: str, drafter: str, values: Mapping[str, Any]) -> None:
    """Check a web request's target model and every path / model setting of its drafter."""
    from ..drafters.kit.base import get
    from ..core.settings import describe

    check_model(model_id or "embedded", "model")
    for info in describe(get(drafter).config_cls):
        for name in (info.name, info.was) if info.was else (info.name,):   # an old name is checked too
            value = values.get(name, info.default)
            if info.kind in ("file", "folder") and isinstance(value, str) and value.strip():
                check_path(value.strip(), name)
            elif info.kind == "model" and isinstance(value, str):
                check_model(value, name)
            elif info.kind == "checkpoint" and isinstance(value, str) and value.strip():
                check_checkpoint(value.strip(), name)
