"""Which paths of a command are its outputs, and the check that no output is one of its inputs
(files/user_files.py: check_outputs_apart), run for every command before it does anything.

`generate --context-file x/ctx.txt --trace x/ctx.txt` would replace the document with the trace,
`import-metrics x/dump.txt --html x/dump.txt` the dump with the figure. Each command lists its
outputs here (OUTPUTS; tests/test_hardening.py checks that every command is listed); every
other value it was given that names an existing path is an input: options, positional
arguments, each item of a repeated option, and the values inside `--set KEY=VALUE`,
`--drafter "name[key=value]"` and `--sweep`. Free text (a prompt, a question, a stop string)
is never a path; a cache a run both reads and writes (`--target-cache`) and the offload folder
(a fresh folder is made inside it) are neither.
"""
from __future__ import annotations

import argparse
import os
import re
from typing import Any, Iterator

from ..files.user_files import check_outputs_apart

# command -> the dests of its outputs (a file or a folder it writes)
OUTPUTS: dict[str, tuple[str, ...]] = {
    "generate": ("trace",),
    "drafters": (),
    "bench": ("out", "export"),
    "index": ("out",),
    "train-glide": ("out", "export"),
    "train-heads": ("out", "export"),
    "train-eagle": ("out", "export"),
    "distill": ("out",),
    "token-map": ("out",),
    "doctor": (),
    "import-metrics": ("html",),
    "plan": ("surface",),
}
# an output only with another flag (plan --surface is read, or with --measure written): dest -> that flag
WRITTEN_WITH = {("plan", "surface"): "measure"}
TEXT = frozenset({"prompt", "question", "stop", "command", "handler", "categories", "embedder", "rerank",
                  "index_command", "kind"})
NEITHER = frozenset({"target_cache", "offload_folder"})
POSITIONAL = {"source": "FILE|URL", "sources": "RESULTS.json|TRACE.json"}
_PARTS = re.compile(r"[\[\],;=]")


def _flag(dest: str) -> str:
    return POSITIONAL.get(dest, "--" + dest.replace("_", "-"))


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item)


def _candidates(value: Any) -> Iterator[str]:
    """The strings in `value` that may name a path: each whole, and each piece of a
    `key=value[,...]` form (a drafter's brackets, --set, --sweep)."""
    for text in _texts(value):
        if not text.strip() or len(text) > 4096 or "\n" in text or "\x00" in text:
            continue
        yield text
        if _PARTS.search(text):
            yield from (p.strip() for p in _PARTS.split(text) if p.strip())


def _exists(text: str) -> bool:
    try:
        return os.path.lexists(os.path.expanduser(text))
    except (OSError, ValueError):
        return False


def run_paths(command: str, args: argparse.Namespace) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(outputs, inputs) of a parsed command line, as (flag, path) pairs."""
    out_dests = tuple(d for d in OUTPUTS[command]
                      if getattr(args, WRITTEN_WITH.get((command, d), d), None) not in (None, False))
    outputs = [(_flag(dest), text) for dest in out_dests
               for text in list(_texts(getattr(args, dest, None)))[-1:]]      # --export FORMAT DIR: the DIR
    inputs = [(_flag(dest), text) for dest, value in vars(args).items()
              if dest not in out_dests and dest not in TEXT and dest not in NEITHER
              for text in _candidates(value) if _exists(text)]
    return outputs, inputs


def check_run_files(args: argparse.Namespace) -> None:
    """FileCheckError (one line, before anything runs) when an output of the command is one of
    its inputs (check_outputs_apart)."""
    command = getattr(args, "command", None)
    if command in OUTPUTS:
        check_outputs_apart(*run_paths(command, args))
