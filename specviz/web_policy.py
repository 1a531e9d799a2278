"""What a request from the web (the explorer page, its `/trace` API) may make the server read.

A visitor names settings, not files, but some settings are server paths (a GLIDE checkpoint, a
corpus index folder) or model ids (the target, a draft model). Settings declare which with
`setting(kind=...)`, so this module checks every drafter without knowing any by name:

- paths ("file", "folder" settings, and a model id that is a local path) must lie inside the
  shipped data folder (specviz/data) or a folder named in SPECVIZ_ALLOWED_DIRS (separated by
  the OS path separator or commas);
- model ids ("model" settings and the target model box) must be listed in
  SPECVIZ_ALLOWED_MODELS (comma-separated) when it is set; unset, any hub id is accepted.

The CLI is run by the machine's own user and is not restricted. docs/security.md has the
whole security model.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from .errors import SpecvizError
from .resources import data_path

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


def check_path(value: str, field: str) -> None:
    """Raise NotAllowedError unless `value` resolves (symlinks followed) inside an allowed folder."""
    path = Path(value).expanduser().resolve()
    roots = allowed_dirs()
    if any(path == root or path.is_relative_to(root) for root in roots):
        return
    raise NotAllowedError(
        f"{field}: {value!r} is outside the folders a web request may read ({', '.join(map(str, roots))}); "
        f"the server's owner can allow more folders with the {ALLOWED_DIRS_ENV} environment variable")


def check_model(model_id: str, field: str) -> None:
    """Raise NotAllowedError for a model id that is not allowed (or a local path outside the folders)."""
    model_id = (model_id or "").strip()
    allowed = allowed_models()
    if allowed is not None and model_id not in allowed:
        raise NotAllowedError(f"{field}: {model_id!r} is not served here; allowed: {', '.join(allowed)} "
                              f"(set by the server's {ALLOWED_MODELS_ENV})")
    if model_id and Path(model_id).expanduser().exists():
        check_path(model_id, field)


def check_request(model_id: str, drafter: str, values: Mapping[str, Any]) -> None:
    """Check a web request's target model and every path / model setting of its drafter."""
    from .drafters.base import get
    from .settings import describe

    check_model(model_id or "embedded", "model")
    for info in describe(get(drafter).config_cls):
        for name in (info.name, info.was) if info.was else (info.name,):   # an old name is checked too
            value = values.get(name, info.default)
            if info.kind in ("file", "folder") and isinstance(value, str) and value.strip():
                check_path(value.strip(), name)
            elif info.kind == "model" and isinstance(value, str):
                check_model(value, name)
