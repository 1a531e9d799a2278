"""specviz: see, teach and debug speculative decoding.

    from specviz import load_model, build_prompt, generate, DRAFTERS
    lm = load_model("embedded")
    trace = generate(lm, build_prompt(lm.tokenizer, "Summarise:", context=doc), "ngram_trie")
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from types import FrameType

__version__ = "0.10.0"


def _interrupted_at_start(signum: int, frame: FrameType | None) -> None:
    """Ctrl-C while the command line is still starting (before cli.main handles it): the same
    end as later, one line and exit status 130, not the interpreter's traceback and death by
    signal. Nothing has been done yet, so there is nothing to clean up."""
    os.write(2, b"\nspecviz: interrupted\n")
    os._exit(130)


def _started_as_cli() -> bool:
    """`python -m specviz` (the -m target, while runpy still locates it) or the `specviz` script."""
    argv = list(getattr(sys, "orig_argv", []))
    as_module = "-m" in argv[:-1] and argv[argv.index("-m") + 1] == "specviz"
    return as_module or os.path.basename(sys.argv[0] if sys.argv else "") == "specviz"


if _started_as_cli() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, _interrupted_at_start)     # cli.main puts the default back

from . import old_paths  # noqa: E402

old_paths.install()        # 0.9's module paths (specviz.verify, specviz.drafters.base, ...) for one release

# The public names are imported on first use (PEP 562), not with the package: `python -m specviz`
# and the `specviz` script import this package before any of their code runs, and torch's import
# takes seconds, in which a Ctrl-C would end the process with a traceback and no exit status of
# its own (__main__.py and cli/ catch it: exit 130).
_PUBLIC = {"DecodingConfig": ("core.decoding", "DecodingConfig"), "DRAFTERS": ("drafters", "REGISTRY"),
           "build_trace": ("engine", "build_trace"), "generate": ("engine", "generate"),
           "generate_steps": ("engine", "generate_steps"), "SpecvizError": ("errors", "SpecvizError"),
           "load_model": ("models", "load_model"), "Prompt": ("models.prompts", "Prompt"),
           "build_prompt": ("models.prompts", "build_prompt"), "StepRecord": ("core.trace", "StepRecord"),
           "Trace": ("core.trace", "Trace"), "DraftTree": ("core.tree", "DraftTree")}

if TYPE_CHECKING:
    from .core.decoding import DecodingConfig
    from .core.trace import StepRecord, Trace
    from .core.tree import DraftTree
    from .drafters import REGISTRY as DRAFTERS
    from .engine import build_trace, generate, generate_steps
    from .errors import SpecvizError
    from .models import load_model
    from .models.prompts import Prompt, build_prompt


def __getattr__(name: str) -> Any:
    """A public name (imported now, then kept), or a sub-package (specviz.core, ...) not imported yet."""
    if name in _PUBLIC:
        module, attr = _PUBLIC[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["__version__", "DRAFTERS", "DecodingConfig", "DraftTree", "Prompt", "SpecvizError", "StepRecord",
           "Trace", "build_prompt", "build_trace", "generate", "generate_steps", "load_model"]
