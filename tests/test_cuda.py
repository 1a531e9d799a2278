"""On a real GPU (skipped without CUDA): the paths a CPU machine can only mock. A target split by
accelerate between a GPU and the CPU decodes exactly as on one device; EAGLE / EAGLE-3 heads and an
MTP module run on CUDA and equal vanilla; the shipped heads and GLIDE draft on CUDA and equal vanilla on the embedded
model in float32. (tests/test_precision.py holds the CUDA timer and the CUDA-vs-CPU equality.)
"""
from __future__ import annotations

import pytest
import torch

from specviz.core.decoding import DecodingConfig
from specviz.drafters import get
from specviz.engine import generate
from specviz.models import load_model
from specviz.models.prompts import build_prompt

from test_eagle import save_random

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GPU_CPU = {"model.embed_tokens": 0, "model.rotary_emb": 0, "model.layers.0": 0,
           "model.layers.1": "cpu", "model.norm": 0, "lm_head": 0}
TEXT = "the cat sat on the mat. the cat sat on the mat. the dog sat on the"


@pytest.fixture(scope="module")
def gpu():
    return load_model("tiny-random", device="cuda", dtype="float32")


@pytest.fixture(scope="module")
def split(gpu):
    import dataclasses

    lm = load_model("tiny-random", dtype="float32", device_map=GPU_CPU)
    return dataclasses.replace(lm, verify_cost=gpu.cost_model())


def test_the_split_puts_a_layer_on_the_cpu(split):
    layer1 = split.model.model.layers[1]
    assert split.device == torch.device("cuda", 0)
    assert split.runtime["device_map"] == {k: str(v) for k, v in GPU_CPU.items()}   # as traces record it
    assert {p.device.type for p in split.model.model.layers[0].parameters()} == {"cuda"}
    assert {p.device.type for p in layer1.parameters()} <= {"cpu", "meta"}


@pytest.mark.parametrize("drafter", ["vanilla", "prompt_lookup", "ngram_trie", "token_recycling"])
def test_gpu_cpu_split_decodes_as_one_gpu(gpu, split, drafter):
    prompt = build_prompt(gpu.tokenizer, TEXT)
    decoding = DecodingConfig(max_new_tokens=24)
    one = generate(gpu, prompt, drafter, None, decoding)
    two = generate(split, prompt, drafter, None, decoding)
    assert not two.errors and two.output_ids == one.output_ids
    assert two.output_ids == generate(gpu, prompt, "vanilla", None, decoding).output_ids


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_eagle_heads_on_cuda_and_on_a_split(gpu, split, tmp_path, kind):
    cpu = load_model("tiny-random", device="cpu", dtype="float32")
    folder = save_random(cpu, kind, tmp_path / kind)
    prompt = build_prompt(gpu.tokenizer, TEXT)
    decoding = DecodingConfig(max_new_tokens=24)
    vanilla = generate(gpu, prompt, "vanilla", None, decoding).output_ids
    for lm in (gpu, split, cpu):
        trace = generate(lm, prompt, kind, {"checkpoint": folder}, decoding)
        assert not trace.errors and trace.output_ids == vanilla, lm.device
        assert any(len(s.tree) for s in trace.steps)


def test_an_mtp_module_on_cuda_and_on_a_split(gpu, split, tmp_path):
    """The MTP module sits on the device of the target's final norm (whose output it reads) and
    uses the target's rotary embedding and LM head there, a split target included."""
    from test_mtp import save_random as save_mtp

    cpu = load_model("tiny-random", device="cpu", dtype="float32")
    folder = save_mtp(cpu, tmp_path / "mtp", copy=True)
    prompt = build_prompt(gpu.tokenizer, TEXT)
    decoding = DecodingConfig(max_new_tokens=24)
    vanilla = generate(gpu, prompt, "vanilla", None, decoding).output_ids
    for lm in (gpu, split, cpu):
        for cfg in ({"checkpoint": folder}, {"checkpoint": folder, "topk": 3, "size_by_cost": False}):
            trace = generate(lm, prompt, "mtp", cfg, decoding)
            assert not trace.errors and trace.output_ids == vanilla, (lm.device, cfg)
            assert any(len(s.tree) for s in trace.steps)


@pytest.mark.slow
def test_shipped_drafters_equal_vanilla_on_cuda_in_float32():
    lm = load_model("embedded", device="cuda", dtype="float32")
    prompt = build_prompt(lm.tokenizer, "Explain what a hash table is, then give an example in Python.")
    decoding = DecodingConfig(max_new_tokens=48)
    vanilla = generate(lm, prompt, "vanilla", None, decoding)
    assert vanilla.peak_memory_mb and vanilla.peak_memory_mb > 0
    for name in ("eagle", "eagle3", "medusa", "hydra", "glide", "ngram_trie", "suffix_decoding"):
        for cfg in ({}, dict(get(name).presets["paper"].values) if "paper" in get(name).presets else {}):
            trace = generate(lm, prompt, name, cfg or None, decoding)
            assert not trace.errors, (name, trace.errors)
            assert trace.output_ids == vanilla.output_ids, (name, cfg)


def test_a_bf16_target_on_cuda_runs_no_cudnn_attention():
    """models/attention.py: loading in bf16 on CUDA turns PyTorch's cuDNN SDPA backend off (a graph
    build per key length made a bf16 step twice as slow as fp32 on an H200), the runtime says so,
    and a tree-verifying generation's profile holds no cuDNN attention call."""
    from torch.profiler import ProfilerActivity, profile

    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)      # PyTorch's default; a load (cached or not) turns it off
        lm = load_model("tiny-random", device="cuda", dtype="bfloat16")
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        assert lm.runtime["attention"] == "sdpa, cuDNN off"
        prompt = build_prompt(lm.tokenizer, TEXT)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            trace = generate(lm, prompt, "ngram_trie", None, DecodingConfig(max_new_tokens=16))
        assert not trace.errors and trace.runtime["attention"] == "sdpa, cuDNN off"
        ops = {e.key for e in prof.key_averages()}
        assert any("attention" in op for op in ops), sorted(ops)[:40]     # the profile did see attention
        assert not any("cudnn_attention" in op for op in ops)
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
