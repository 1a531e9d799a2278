"""Errors that carry a message meant for the user (CLI, UI), as opposed to bugs.

Every error here names what was wrong and what is allowed; front ends show `str(err)`
and never a traceback.
"""
from __future__ import annotations

import warnings
from typing import Sequence


class SpecvizError(Exception):
    """Base class: a problem with the user's input or environment, with a readable message."""


class ConfigError(SpecvizError, ValueError):
    """A setting is out of range or inconsistent. `field` names the offending setting and
    `reason` says what is wrong with it (front ends put their own name for the field before it)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


def check_choice(field: str, value: object, choices: Sequence[str]) -> None:
    """ConfigError naming `field` when `value` is not one of `choices`."""
    if value not in choices:
        raise ConfigError(field, f"must be one of {', '.join(choices)}, got {value!r}")


def not_unicode(text: str) -> str | None:
    """Why `text` cannot be encoded (a lone surrogate: a JSON "\\ud800" escape, or a byte the
    terminal could not decode, as Python passes it on), in words; None for valid Unicode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return (f"not valid Unicode text at character {err.start} ({text[err.start]!r}: an undecodable "
                "byte or a lone surrogate)")
    return None


class ModelLoadError(SpecvizError):
    """A model id or path could not be loaded."""


class PromptError(SpecvizError, ValueError):
    """The prompt is empty or does not fit the model's context."""


class UnknownDrafterError(SpecvizError, KeyError):
    """No drafter is registered under that name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class TraceFormatError(SpecvizError, ValueError):
    """A trace file is malformed or from another schema version."""


class SpecvizWarning(UserWarning):
    """A warning of specviz's own about what a run will do (a checkpoint run although a check
    failed, because the user said so); the CLI prints it as one `specviz: warning: ...` line."""


class RenamedWarning(FutureWarning):
    """An old name (a CLI flag, a setting) was used; it still works. FutureWarning, so Python
    shows it by default; the CLI prints it as one `specviz: warning: ...` line."""


def warn_renamed(old: str, new: str) -> None:
    """Warn that `old` is now called `new` (and still accepted)."""
    warnings.warn(f"{old} is renamed {new}; the old name still works but will go", RenamedWarning,
                  stacklevel=3)
