"""The linter and the type checker, as tests: `ruff check` on the whole tree (the package, app.py,
the tests and the benchmarks' scripts) and `mypy` on specviz/ and app.py, with the settings in pyproject.toml ([tool.ruff], [tool.mypy]); a finding fails the test with
the tool's own report. mypy keeps its cache in .mypy_cache (git-ignored): a warm run takes a
few seconds, a cold one about twenty."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TARGETS = ["specviz", "app.py"]
LINTED = [*TARGETS, "tests", "benchmarks"]


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    try:
        __import__(tool)
    except ImportError:
        pytest.fail(f"{tool} is not installed: pip install -r requirements-dev.txt")
    return subprocess.run([sys.executable, "-m", tool, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_ruff_finds_nothing():
    done = _run("ruff", "check", "--no-fix", *LINTED)
    assert done.returncode == 0, f"ruff check {' '.join(LINTED)}:\n{done.stdout}{done.stderr}"


def test_mypy_finds_nothing():
    done = _run("mypy", *TARGETS)
    assert done.returncode == 0, f"mypy {' '.join(TARGETS)}:\n{done.stdout}{done.stderr}"


def test_the_checks_have_teeth(tmp_path):
    """A module with an undefined name and a wrong argument type fails both tools."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(n: int) -> int:\n    return n + undefined_name\n\n\nf('one')\n")
    ruff = _run("ruff", "check", "--no-fix", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert ruff.returncode == 1 and "F821" in ruff.stdout
    mypy = _run("mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(tmp_path / "cache"),
                str(bad))
    assert mypy.returncode == 1 and "arg-type" in mypy.stdout
