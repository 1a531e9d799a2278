"""models/attention.py: a half-precision target on CUDA turns PyTorch's cuDNN SDPA backend off
(it rebuilds a graph per key length, every decoding step), nothing else does, the opt-out keeps it,
and the runtime says which. The CUDA side (a bf16 generation runs no cuDNN attention) is in
tests/test_cuda.py."""
from __future__ import annotations

import pytest
import torch

from specviz.models import attention_label, load_model
from specviz.errors import ModelLoadError
from specviz.models.attention import ENV, avoid_cudnn_attention

CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def cudnn_flag():
    """Each test starts with the flag on and leaves it as it found it (it is process-wide)."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(before)


@pytest.mark.parametrize("device, dtype", [(torch.device("cpu"), torch.bfloat16), (torch.device("cpu"), torch.float32),
                                           (CUDA, torch.float32)])
def test_only_half_precision_on_cuda_touches_the_flag(device, dtype):
    assert avoid_cudnn_attention(device, dtype) is False
    assert torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_on_cuda_turns_cudnn_attention_off(dtype, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert avoid_cudnn_attention(CUDA, dtype) is True
    assert not torch.backends.cuda.cudnn_sdp_enabled()
    # the other kernels stay available
    assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()


def test_the_opt_out_leaves_pytorchs_choice(monkeypatch):
    monkeypatch.setenv(ENV, "1")
    assert avoid_cudnn_attention(CUDA, torch.bfloat16) is False
    assert torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.parametrize("value", ["yes", "true", "2"])
def test_a_wrong_opt_out_value_is_refused_in_words(value, monkeypatch):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(ModelLoadError, match=f"{ENV}: '{value}' is not 0 or 1"):
        avoid_cudnn_attention(CUDA, torch.bfloat16)
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_the_cli_says_what_was_wrong_with_the_variable(monkeypatch, capsys):
    from specviz.cli import main

    monkeypatch.setenv(ENV, "yes")
    code = main(["generate", "--model", "tiny-random", "--prompt", "hi", "--max-new-tokens", "2"])
    err = capsys.readouterr().err
    assert code != 0 and f"{ENV}: 'yes' is not 0 or 1" in err and "Traceback" not in err


def test_the_runtime_says_when_cudnn_is_off():
    from specviz.models import tiny_random_model

    model = tiny_random_model(64)                   # as loaded for a GPU (a CPU load runs sdpa_grouped)
    assert model.config._attn_implementation == "sdpa"
    assert attention_label(model, torch.device("cpu")) == "sdpa"
    assert attention_label(model, CUDA) == "sdpa"                     # flag on: nothing to say
    avoid_cudnn_attention(CUDA, torch.bfloat16)
    assert attention_label(model, CUDA) == "sdpa, cuDNN off"
    assert attention_label(model, torch.device("cpu")) == "sdpa"      # a CPU run never used cuDNN


def test_loading_on_a_cpu_leaves_the_flag():
    lm = load_model("tiny-random", device="cpu", dtype="bfloat16")
    assert torch.backends.cuda.cudnn_sdp_enabled()
    assert lm.runtime["attention"] == "sdpa_grouped"          # a CPU's own choice (grouped_attention.py)
