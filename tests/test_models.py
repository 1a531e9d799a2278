"""models.load_model: bad ids, devices and dtypes end in a ModelLoadError naming the option;
the explicit runtime choices (cpu_linear, the lazily calibrated cost model) and their record
in LoadedModel.runtime and the Trace."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from specviz import DecodingConfig
from specviz.engine import generate
from specviz.errors import ModelLoadError, PromptError
from specviz.models import load_model, resolve_device, resolve_dtype
from specviz.models.prompts import build_prompt


@pytest.mark.parametrize("model_id", ["./no/such/model", "/no/such/model", "~/no/such/model", "a/b/c"])
def test_missing_local_model(model_id):
    with pytest.raises(ModelLoadError, match="no such directory"):
        load_model(model_id)


def test_model_option_errors():
    with pytest.raises(ModelLoadError, match="empty"):
        load_model("  ")
    with pytest.raises(ModelLoadError, match="dtype"):
        resolve_dtype("float8", torch.device("cpu"))
    with pytest.raises(ModelLoadError, match="device"):
        resolve_device("warp-drive")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bf16", torch.device("cpu")) == torch.bfloat16
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA"):
            resolve_device("cuda")


def test_load_model_takes_what_a_caller_tries_and_refuses_the_rest():
    """A torch dtype and the CLI's auto/on/off words are taken; a model id that is not text
    and a cpu_linear that is no choice are refused in words (it was silently 'on')."""
    assert load_model("tiny-random", dtype=torch.bfloat16).dtype == torch.bfloat16
    assert load_model("tiny-random", cpu_linear="off").runtime["cpu_linear"] is False
    with pytest.raises(ModelLoadError, match="cpu_linear: must be one of auto, on, off, got 'maybe'"):
        load_model("tiny-random", cpu_linear="maybe")
    with pytest.raises(ModelLoadError, match="cpu_linear"):
        load_model("tiny-random", cpu_linear=1)
    with pytest.raises(ModelLoadError, match="model id as text.*not int"):
        load_model(5)
    with pytest.raises(ModelLoadError, match="unknown dtype 'float8_e4m3fn'"):
        load_model("tiny-random", dtype=torch.float8_e4m3fn)
    with pytest.raises(PromptError, match="no tokenizer"):
        build_prompt(None, "hi")


def test_cpu_linear_is_an_explicit_option_recorded_in_the_trace():
    on = load_model("tiny-random", device="cpu", dtype="float32")                    # default: on on a CPU
    off = load_model("tiny-random", device="cpu", dtype="float32", cpu_linear=False)
    assert on.cpu_linear and not off.cpu_linear and on.model is not off.model
    patched = [hasattr(m, "few_rows_limit") for m in off.model.modules() if isinstance(m, nn.Linear)]
    assert patched and not any(patched)                                              # off: untouched
    assert on.runtime["cpu_linear"] is True and off.runtime["cpu_linear"] is False
    assert on.runtime["device"] == "cpu" and on.runtime["dtype"] == "float32" and on.runtime["attention"]
    trace = generate(off, build_prompt(off.tokenizer, "Hi"), "vanilla", None, DecodingConfig(max_new_tokens=2))
    assert trace.runtime == off.runtime
    assert type(trace).from_json(trace.to_json()).runtime == off.runtime


def test_cpu_linear_on_needs_a_cpu_device(monkeypatch):
    from specviz.models import cpu_linear_option

    assert [cpu_linear_option(t) for t in ("auto", "on", "off")] == [None, True, False]
    with pytest.raises(ModelLoadError, match="cpu_linear: must be one of auto, on, off"):
        cpu_linear_option("yes")
    with pytest.raises(ModelLoadError, match="unknown device 'meta'"):     # not a device specviz runs on
        load_model("tiny-random", device="meta", cpu_linear=True)
    with monkeypatch.context() as m:                              # a GPU, as torch would see one
        m.setattr(torch.cuda, "is_available", lambda: True)
        m.setattr(torch.cuda, "device_count", lambda: 1)
        with pytest.raises(ModelLoadError, match="cpu_linear: on is for a CPU device.*cuda"):
            load_model("tiny-random", device="cuda", cpu_linear=True)     # refused before any load
    if torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="cpu_linear: on is for a CPU device"):
            load_model("tiny-random", device="cuda", cpu_linear=True)


@pytest.mark.parametrize("flag, expected", [("off", False), ("on", True), ("auto", True)])
def test_the_cpu_linear_flag_reaches_the_trace(tmp_path, capsys, flag, expected):
    """generate --cpu-linear auto|on|off -> load_model's option -> Trace.runtime (auto: on, on a CPU)."""
    from specviz import cli
    from specviz.core.trace import Trace

    path = tmp_path / "t.json"
    code = cli.main(["generate", "--model", "tiny-random", "--device", "cpu", "--prompt", "Hi", "--no-stream",
                     "--max-new-tokens", "2", "--cpu-linear", flag, "--trace", str(path)])
    assert code == 0, capsys.readouterr().err
    assert Trace.from_json(path.read_text(encoding="utf-8")).runtime["cpu_linear"] is expected


def test_the_cost_model_is_calibrated_on_first_use_only():
    lm = load_model("tiny-random", device="cpu", dtype="float32")
    assert lm.verify_cost is None                     # loading does not time the model
    first = lm.cost_model()
    assert lm.cost_model() is first                   # once per model


def test_the_model_cache_drops_the_least_recent_and_keeps_its_timing(monkeypatch):
    """Two models stay loaded; a third drops the one asked for least recently. A dropped model
    loaded again is not timed again (its cost model is kept by load key), and "auto" on a CPU is
    float32: one load, not two."""
    from specviz.models import loading

    monkeypatch.setattr(loading, "_CACHE", {})
    monkeypatch.setattr(loading, "_TIMED", {})
    a = load_model("tiny-random", "cpu", "auto", cpu_linear=False)
    assert load_model("tiny-random", "cpu", "float32", cpu_linear=False) is a
    timed = a.cost_model()
    b = load_model("tiny-random", "cpu", "float32", cpu_linear=True)
    assert load_model("tiny-random", "cpu", "auto", cpu_linear=False) is a      # a is now the most recent
    load_model("tiny-random", "cpu", "bfloat16", cpu_linear=False)              # drops b, not a
    assert load_model("tiny-random", "cpu", "float32", cpu_linear=False) is a
    assert load_model("tiny-random", "cpu", "float32", cpu_linear=True) is not b    # drops bfloat16
    load_model("tiny-random", "cpu", "bfloat16", cpu_linear=False)                  # drops a
    # loaded again, a is a new model with the same timing, not timed again
    monkeypatch.setattr(loading, "calibrate", lambda model: pytest.fail("timed again"))
    again = load_model("tiny-random", "cpu", "float32", cpu_linear=False)
    assert again is not a and again.model is not a.model and again.cost_model() is timed
