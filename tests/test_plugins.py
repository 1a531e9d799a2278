"""Drafter plugins: packages that register drafters through the `specviz.drafters` entry points.

The unit tests feed load_plugins fake entry points (good, broken, foreign, clashing); the slow
test installs the out-of-tree example (examples/specviz-echo-drafter) into a folder with pip and
runs it through the CLI (drafters, generate, bench) and the explorer (/config and the /trace API)
in fresh processes, where it is found the way a user's installed plugin is.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from specviz.drafters import REGISTRY
from specviz.drafters.kit import plugins
from specviz.drafters.kit.base import DrafterSpec
from specviz.core.trace import Trace

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "specviz-echo-drafter"


def _example_spec() -> DrafterSpec:
    """The out-of-tree example's own spec (examples/specviz-echo-drafter), imported from its file."""
    path = EXAMPLE / "specviz_echo_drafter" / "__init__.py"
    module_spec = importlib.util.spec_from_file_location("_specviz_echo_example", path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module                 # dataclasses look their module up there
    module_spec.loader.exec_module(module)
    return module.SPEC


GOOD = dataclasses.replace(_example_spec(), name="plugin_good")


class _EntryPoint:
    def __init__(self, name: str, value: str, obj=None, error: Exception | None = None) -> None:
        self.name, self.value, self._obj, self._error = name, value, obj, error

    def load(self):
        if self._error is not None:
            raise self._error
        return self._obj


def test_plugins_register_and_broken_ones_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    clash = dataclasses.replace(GOOD, name="vanilla")
    eps = [_EntryPoint("good", "pkg_good:SPEC", lambda: GOOD),                  # a callable returning a spec
           _EntryPoint("broken", "pkg_broken:SPEC", error=ImportError("No module named 'pkg_broken'")),
           _EntryPoint("foreign", "pkg_foreign:thing", obj=42),
           _EntryPoint("clash", "pkg_clash:SPEC", obj=clash)]
    monkeypatch.setattr(plugins, "entry_points", lambda group: eps if group == plugins.GROUP else [])
    monkeypatch.setattr(plugins, "FAILED", {})
    monkeypatch.setattr(plugins, "LOADED", {})
    builtin_vanilla = REGISTRY["vanilla"]
    try:
        with pytest.warns(plugins.PluginWarning) as caught:
            names = plugins.load_plugins()
        assert names == ["plugin_good"] and REGISTRY["plugin_good"] is GOOD
        assert REGISTRY["vanilla"] is builtin_vanilla                  # a plugin cannot replace a built-in
        messages = " | ".join(str(w.message) for w in caught)
        for name, words in (("broken", "No module named 'pkg_broken'"), ("foreign", "not a specviz DrafterSpec"),
                            ("clash", "built-in drafter")):
            assert f"drafter plugin {name!r}" in messages and words in messages
        assert set(plugins.FAILED) == {"broken", "foreign", "clash"}
        # the plugin is listed, with its settings, like a built-in
        from specviz.cli.drafters import drafter_listing
        listed = {d["name"]: d for d in drafter_listing()}
        assert listed["plugin_good"]["settings"][0]["name"] == "k"
    finally:
        REGISTRY.pop("plugin_good", None)


# --- the example plugin, installed -------------------------------------------------------------

@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """pip installs the example into a folder (no network: --no-deps, no build isolation);
    returns the environment of a process that sees it and this checkout's specviz."""
    target = tmp_path_factory.mktemp("plugin-site")
    source = tmp_path_factory.mktemp("plugin-src") / EXAMPLE.name   # setuptools builds in place:
    shutil.copytree(EXAMPLE, source)                                # keep the checkout clean
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                    "--disable-pip-version-check", "-q", "--target", str(target), str(source)],
                   check=True, capture_output=True, text=True, timeout=300)
    assert (target / "specviz_echo_drafter").is_dir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(target)]))
    return env


def _specviz(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specviz", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_the_example_plugin_runs_through_the_cli(installed: dict[str, str], tmp_path: Path) -> None:
    done = _specviz(installed, "drafters", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    echo = {d["name"]: d for d in json.loads(done.stdout)}["echo"]
    assert echo["summary"].startswith("Propose the last k tokens") and echo["settings"][0]["name"] == "k"
    out = tmp_path / "echo.json"
    done = _specviz(installed, "generate", "--model", "tiny-random", "--drafter", "echo", "--set", "k=3",
                    "--prompt", "la la la la la la", "--max-new-tokens", "24", "--no-stream",
                    "--trace", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    echo = Trace.from_json(out.read_text())
    assert echo.drafter == "echo" and echo.drafter_config == {"k": 3}
    # lossless (the engine verifies): vanilla on the same prompt ids, here in this process
    # (tiny-random is built from a fixed seed, so both processes hold the same weights)
    from specviz import generate, load_model
    vanilla = generate(load_model("tiny-random", "cpu", "float32"), list(echo.prompt_ids), "vanilla",
                       decoding={"max_new_tokens": 24})
    assert echo.output_ids == vanilla.output_ids and vanilla.output_ids
    first = echo.steps[0].tree
    assert first.tokens == echo.prompt_ids[-3:] and set(first.sources) == {"echo"}   # the last 3 again
    # and in bench
    done = _specviz(installed, "bench", "--model", "tiny-random", "--drafters", "vanilla,echo[k=2]", "--peers", "",
                    "--categories", "qa", "--limit", "1", "--warmup", "0", "--max-new-tokens", "8",
                    "--out", str(tmp_path / "bench"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "bench" / "results.json").read_text())["rows"]
    assert "echo[k=2]" in {r["method"] for r in rows}


UI_SCRIPT = textwrap.dedent("""
    import json, sys, urllib.request
    sys.path.insert(0, sys.argv[1])
    from serving import launch_local
    from gradio_client import Client
    import app
    url = launch_local(app.demo)
    try:
        config = json.loads(urllib.request.urlopen(url + "config", timeout=60).read())
        drafter = [c for c in config["components"] if c.get("props", {}).get("elem_id") == "drafter"][0]
        choices = [c[1] if isinstance(c, list) else c for c in drafter["props"]["choices"]]
        text = Client(url, verbose=False).predict("tiny-random", "echo", "la la la", "", '{"k": 2}', 8, 0.0, 0,
                                                  api_name="/trace")
        form = [c["props"].get("label") for c in config["components"]
                if "last tokens to propose again" in str(c.get("props", {}).get("info", ""))]
        print("RESULT " + json.dumps({"choices": choices, "form": form, "trace": json.loads(text)}))
    finally:
        app.demo.close()
""")


@pytest.mark.slow
def test_the_example_plugin_is_in_the_explorer(installed: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "ui_check.py"
    script.write_text(UI_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(ROOT / "tests")], env=installed, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads([line for line in done.stdout.splitlines() if line.startswith("RESULT ")][0][7:])
    assert "echo" in result["choices"] and "ngram_trie" in result["choices"]
    assert result["form"] == ["k"]                      # its settings form, made from its config
    trace = Trace.from_dict(result["trace"])
    assert trace.drafter == "echo" and trace.drafter_config == {"k": 2} and trace.totals.new_tokens == 8
