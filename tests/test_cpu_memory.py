"""models/cpu_memory.py: glibc told to serve a growing KV cache from its heap, once per process, on a
CPU load only, said in the runtime, and turned off by the environment."""
from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from specviz.models import cpu_memory

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def _in_new_process(code: str, env_value: str | None = None) -> str:
    import os
    env = {k: v for k, v in os.environ.items() if k != cpu_memory.ENV}
    if env_value is not None:
        env[cpu_memory.ENV] = env_value
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's")
def test_it_is_applied_once_and_the_environment_turns_it_off():
    code = ("from specviz.models import cpu_memory as m; a = m.state(); b = m.keep_freed_memory(); "
            "print(a, b, m.keep_freed_memory(), m.state())")
    assert _in_new_process(code) == "None on on on"
    assert _in_new_process(code, "0") == "None off off off"


def test_elsewhere_it_says_why_it_did_nothing(monkeypatch):
    monkeypatch.delenv(cpu_memory.ENV, raising=False)
    monkeypatch.setattr(platform, "system", lambda: "Darwin")
    assert cpu_memory._apply() == "unavailable: not Linux with glibc"


def test_a_cpu_model_says_it_in_its_runtime():
    from specviz.models.loading import load_model

    lm = load_model("tiny-random", device="cpu")
    assert lm.runtime["keep_freed_memory"] == cpu_memory.state()
    assert cpu_memory.state() in ("on", "off") or cpu_memory.state().startswith("unavailable: ")
