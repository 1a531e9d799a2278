"""ZeroGPU: on a Space with the `spaces` package and SPACES_ZERO_GPU set, app.py loads the default
model when it is imported (outside the GPU window), without running it; the first run then
calibrates it. Elsewhere importing app.py loads nothing. `spaces` is faked here."""
from __future__ import annotations

import importlib
import runpy
import sys
import types
from pathlib import Path

import pytest

import specviz.models
import specviz.models.loading as models
import specviz.ui.gpu as gpu_module

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def fake_spaces(monkeypatch: pytest.MonkeyPatch):
    spaces = types.ModuleType("spaces")
    spaces.decorated = []

    def GPU(duration: int = 60):                              # noqa: N802 - the real name
        def wrap(fn):
            spaces.decorated.append(fn.__name__)
            return fn
        return wrap

    spaces.GPU = GPU
    monkeypatch.setitem(sys.modules, "spaces", spaces)
    yield spaces
    monkeypatch.delitem(sys.modules, "spaces")
    importlib.reload(gpu_module)                              # back to "no spaces"


def _import_app(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    calls: list[tuple] = []
    monkeypatch.setattr(specviz.models, "load_model", lambda *a, **kw: calls.append((a, kw)) or "model")
    importlib.reload(gpu_module)
    runpy.run_path(str(ROOT / "app.py"), run_name="app")       # builds the page; does not launch
    return calls


def test_zero_gpu_loads_the_default_model_at_import(fake_spaces, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPACES_ZERO_GPU", "true")
    calls = _import_app(monkeypatch)
    assert calls == [(("embedded",), {"calibrate_cost": False})]
    assert "stream_generate" in fake_spaces.decorated          # runs happen inside the GPU window


def test_no_preload_without_zero_gpu(fake_spaces, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPACES_ZERO_GPU", raising=False)       # a Space on a CPU or a dedicated GPU
    assert _import_app(monkeypatch) == []


def test_a_preloaded_model_is_calibrated_by_its_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_CACHE", {})
    ran: list[int] = []
    real = models.calibrate
    monkeypatch.setattr(models, "calibrate", lambda model: ran.append(1) or real(model))
    monkeypatch.setattr(models, "_COSTS", models.weakref.WeakKeyDictionary())
    monkeypatch.setattr(models, "_TIMED", {})                  # no timing kept from a dropped model
    pre = models.load_model("tiny-random", device="cpu", dtype="float32", calibrate_cost=False)
    assert pre.verify_cost is None and ran == []               # no forward at import
    lm = models.load_model("tiny-random", device="cpu", dtype="float32")
    assert lm is pre and ran == []                              # a load never runs the model
    cost = lm.cost_model()                                      # the first generation asks for it
    assert cost is not None and ran == [1]
    assert lm.cost_model() is cost and ran == [1]               # once per model
    assert models.load_model("tiny-random", device="cpu", dtype="float32", calibrate_cost=True) is lm
    assert ran == [1]
