"""Devices and dtypes: every path that picks one, the CUDA phase timer and peak GPU memory,
cpu_linear staying off off a CPU. CUDA's availability is mocked where the decision is the
test; the few tests that need a real GPU are skipped without one."""
from __future__ import annotations

import argparse

import pytest
import torch

from specviz import cli
from specviz.models import loading as models
from specviz.core.decoding import DecodingConfig
from specviz.engine import generate
from specviz.errors import ModelLoadError
from specviz.glide.train import autocast_dtype
from specviz.core.precision import DTYPE_CHOICES
from specviz.models.prompts import build_prompt
from specviz.core.timing import PeakMemory, PhaseTimer

CUDA = torch.device("cuda")
CPU = torch.device("cpu")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _cuda(monkeypatch: pytest.MonkeyPatch, available: bool, bf16: bool = True) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2 if available else 0)


# --- resolve_device ------------------------------------------------------------------------

@pytest.mark.parametrize("available, want", [(True, "cuda"), (False, "cpu")])
def test_auto_device_follows_cuda_availability(monkeypatch, available, want) -> None:
    _cuda(monkeypatch, available)
    assert models.resolve_device("auto").type == want


def test_explicit_devices(monkeypatch) -> None:
    _cuda(monkeypatch, True)
    assert models.resolve_device("cuda:1") == torch.device("cuda:1")
    assert models.resolve_device("cpu") == CPU
    _cuda(monkeypatch, False)
    with pytest.raises(ModelLoadError, match="CUDA was asked for but torch sees no GPU"):
        models.resolve_device("cuda")
    with pytest.raises(ModelLoadError, match="unknown device 'gpu0'"):
        models.resolve_device("gpu0")


@pytest.mark.parametrize("device", ["xpu", "meta", "mps", "cpu:1", "hpu"])
def test_device_types_specviz_does_not_run_on_are_refused(device: str) -> None:
    """torch parses these, and they failed later with a traceback (xpu, meta) or a misleading
    'does not fit' (mps)."""
    with pytest.raises(ModelLoadError, match=f"unknown device '{device}'; use auto, cpu, cuda or cuda:N"):
        models.resolve_device(device)


def test_a_gpu_index_past_the_gpus_is_refused(monkeypatch) -> None:
    _cuda(monkeypatch, True)                            # two GPUs
    assert models.resolve_device("cuda:1") == torch.device("cuda:1")
    with pytest.raises(ModelLoadError, match=r"asks for GPU 7, but torch sees 2 \(cuda:0 .. cuda:1\)"):
        models.resolve_device("cuda:7")


# --- resolve_dtype -------------------------------------------------------------------------

def test_auto_dtype_is_float32_on_a_cpu() -> None:
    assert models.resolve_dtype("auto", CPU) == torch.float32
    assert models.resolve_dtype("auto", CPU, fp32_bytes=10**12, free_bytes=1) == torch.float32


@pytest.mark.parametrize("bf16, low", [(True, torch.bfloat16), (False, torch.float16)])
def test_auto_dtype_on_a_gpu_is_float32_when_the_model_fits(monkeypatch, bf16, low) -> None:
    _cuda(monkeypatch, True, bf16)
    gib = 2**30
    assert models.resolve_dtype("auto", CUDA) == torch.float32                      # size not known yet
    assert models.resolve_dtype("auto", CUDA, fp32_bytes=gib, free_bytes=70 * gib) == torch.float32
    assert models.resolve_dtype("auto", CUDA, fp32_bytes=35 * gib, free_bytes=70 * gib) == torch.float32
    assert models.resolve_dtype("auto", CUDA, fp32_bytes=36 * gib, free_bytes=70 * gib) == low
    assert models.low_precision_dtype() == low


def test_explicit_dtypes_are_taken_as_given() -> None:
    for name, want in (("float32", torch.float32), ("bfloat16", torch.bfloat16), ("float16", torch.float16),
                       ("bf16", torch.bfloat16), ("fp16", torch.float16)):
        assert models.resolve_dtype(name, CUDA) == want and models.resolve_dtype(name, CPU) == want
    with pytest.raises(ModelLoadError, match="unknown dtype 'float8'"):
        models.resolve_dtype("float8", CPU)


def test_dtype_choices_are_the_ones_the_loader_knows() -> None:
    assert DTYPE_CHOICES[0] == "auto"
    for name in DTYPE_CHOICES[1:]:
        assert models.resolve_dtype(name, CPU) == getattr(torch, name)     # "bfloat16" -> torch.bfloat16


def test_load_model_in_bfloat16_on_the_cpu() -> None:
    lm = models.load_model("tiny-random", device="cpu", dtype="bfloat16")
    assert lm.dtype == torch.bfloat16 and next(lm.model.parameters()).dtype == torch.bfloat16
    prompt = build_prompt(lm.tokenizer, "Say something.")
    trace = generate(lm, prompt, "ngram_trie", None, DecodingConfig(max_new_tokens=6))
    assert trace.dtype == "bfloat16" and trace.totals.new_tokens == 6


# --- cpu_linear is a CPU trick -------------------------------------------------------------

def test_cpu_linear_decision() -> None:
    assert models.uses_cpu_linear(CPU)
    assert not models.uses_cpu_linear(CUDA)
    assert not models.uses_cpu_linear(torch.device("meta"))


def test_the_loader_leaves_cpu_linear_off_off_a_cpu(monkeypatch) -> None:
    """The whole load path on a non-CPU device (meta: no memory, no kernels; calibration is
    stubbed since meta tensors cannot be timed) keeps every nn.Linear as it was."""
    on_cpu = models.load_model("tiny-random", device="cpu", dtype="float32")   # before the stub
    assert models.cpu_linear_active(on_cpu.model)
    monkeypatch.setattr(models, "calibrate", lambda model: None)
    lm = models._load("tiny-random", torch.device("meta"), torch.float32, "float32")
    assert next(lm.model.parameters()).device.type == "meta"
    assert not models.cpu_linear_active(lm.model)


def test_attention_implementation_is_reported(tiny_lm_tok) -> None:
    from specviz.models.attention import attention_implementation

    assert attention_implementation(tiny_lm_tok.model) in ("sdpa", "sdpa_grouped", "eager", "flash_attention_2")
    assert tiny_lm_tok.runtime["attention"] == attention_implementation(tiny_lm_tok.model)     # on a CPU


# --- the phase timer on CUDA: synchronised at both edges of every phase --------------------

def test_timer_synchronises_the_device_at_every_phase_edge(monkeypatch) -> None:
    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    timer = PhaseTimer(CUDA)
    with timer("verify.forward"):
        events.append("forward kernels queued")
    with timer("verify.accept"):
        events.append("accept")
    # the forward's kernels are waited for before its clock stops, not inside verify.accept
    assert events == ["sync", "forward kernels queued", "sync", "sync", "accept", "sync"]
    assert set(timer.take()) == {"verify.forward", "verify.accept"}


def test_timer_does_not_synchronise_on_a_cpu(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: pytest.fail("synchronised on a CPU"))
    timer = PhaseTimer(CPU)
    with timer("prefill"):
        pass
    timer.now()
    assert "prefill" in timer.take()


# --- peak GPU memory -------------------------------------------------------------------------

def test_peak_memory_is_none_on_a_cpu_and_in_cpu_traces(tiny_lm_tok) -> None:
    assert PeakMemory(CPU).peak_mb() is None
    trace = generate(tiny_lm_tok, build_prompt(tiny_lm_tok.tokenizer, "Hi."), "vanilla", None,
                     DecodingConfig(max_new_tokens=3))
    assert trace.peak_memory_mb is None and all(s.peak_memory_mb is None for s in trace.steps)
    from specviz.cli.generate import summary_line
    assert "peak GPU memory" not in summary_line(trace)


def test_peak_memory_is_reset_at_start_and_read_in_mib(monkeypatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: calls.append("reset"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 3 * 2**20)
    memory = PeakMemory(CUDA)
    assert calls == ["reset"] and memory.peak_mb() == 3.0


# --- --dtype everywhere ------------------------------------------------------------------------

def _subparser(name: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


@pytest.mark.parametrize("command", ["generate", "bench", "doctor", "train-glide"])
def test_every_command_that_loads_a_model_takes_the_dtypes(command) -> None:
    action = next(a for a in _subparser(command)._actions if a.dest == "dtype")
    named = tuple(action.choices) if action.choices else tuple(action.metavar.strip("{}").split(","))
    assert named == DTYPE_CHOICES


def test_a_bad_dtype_is_one_line(capsys) -> None:
    code = cli.main(["generate", "--model", "tiny-random", "--prompt", "x", "--dtype", "float8"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "dtype" in err and "float8" in err and "bfloat16" in err


def test_train_glide_autocast_choice(monkeypatch) -> None:
    _cuda(monkeypatch, True, bf16=True)
    assert autocast_dtype("float32", CUDA) is None
    assert autocast_dtype("auto", CUDA) == torch.bfloat16
    assert autocast_dtype("auto", CPU) is None
    assert autocast_dtype("bfloat16", CPU) == torch.bfloat16
    assert autocast_dtype("float16", CUDA) == torch.float16
    _cuda(monkeypatch, True, bf16=False)
    assert autocast_dtype("auto", CUDA) is None


def test_explorer_panel_passes_the_dtype(panel) -> None:
    from specviz.errors import ConfigError

    import dataclasses

    def request(dtype: str):
        return panel.request(panel.form(model="tiny-random", drafter="vanilla", message="Hi.", dtype=dtype))

    assert request("bfloat16").dtype == "bfloat16"
    assert dataclasses.replace(request("auto"), drafter="ngram_trie", settings=()).dtype == "auto"
    with pytest.raises(ConfigError, match="dtype"):
        request("float8")


# --- on a real GPU -----------------------------------------------------------------------------

@needs_cuda
def test_cuda_run_equals_the_cpu_run_in_float32() -> None:
    cpu = models.load_model("tiny-random", device="cpu", dtype="float32")
    gpu = models.load_model("tiny-random", device="cuda", dtype="float32")
    assert not models.cpu_linear_active(gpu.model)
    prompt = build_prompt(cpu.tokenizer, "Count: one two three one two three")
    decoding = DecodingConfig(max_new_tokens=24)
    for drafter in ("vanilla", "prompt_lookup", "ngram_trie"):
        a = generate(cpu, prompt, drafter, None, decoding)
        b = generate(gpu, prompt, drafter, None, decoding)
        assert a.output_ids == b.output_ids, drafter
        assert b.peak_memory_mb is not None and b.peak_memory_mb > 0
        assert b.totals.phase_seconds["verify.forward"] > 0


@needs_cuda
def test_cuda_timer_charges_the_forward_to_its_phase() -> None:
    x = torch.randn(4096, 4096, device=CUDA)
    timer = PhaseTimer(CUDA)
    with timer("verify.forward"):
        for _ in range(20):
            x = x @ x / 64
    with timer("verify.accept"):
        pass
    t = timer.take()
    assert t["verify.forward"] > t["verify.accept"]
