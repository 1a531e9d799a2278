"""The static verify step (specviz/models/static_step.py): the verify forward on a preallocated
StaticKV in padded row buckets, eager or compiled, stays token-identical to plain decoding on the
dynamic cache for every drafter that needs no trained checkpoint (plus Medusa's random heads,
whose hidden-state hooks run the static cache eagerly), across row buckets, when the cache must
grow, and at the model's full context; the --compile switch refuses bad values in one line and
is recorded in the runtime; the GPU kit's benchmark dry-runs on the CPU."""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import network_drafter_config, run_ids
from specviz.core.decoding import DecodingConfig
from specviz.drafters import REGISTRY
from specviz.engine import generate_steps
from specviz.errors import ModelLoadError
from specviz.models import kvcache, load_model, static_step
from specviz.models.kvcache import CacheView, StaticKV, check_supported, commit, crop_to, layer_kv, length
from specviz.models.static_step import BUCKETS, bucket, compile_option, generation_cache, release, resolve_compile

ROOT = Path(__file__).resolve().parent.parent
NEW = 48
PROMPTS = {"repetitive": [5, 6, 7, 8, 9] * 6, "loop": [1, 2, 3, 3, 3, 3, 3, 3]}
NEEDS_MODEL = {"vanilla", "oracle", "draft_model", "glide", "self_draft", "medusa", "hydra", "eagle", "eagle3", "mtp"}
TREE = ("ngram_trie", {"size_by_cost": False, "num_draft": 48, "prefix_len": 1, "n": 4})
CONFIGS = [(name, {}) for name in sorted(REGISTRY) if name not in NEEDS_MODEL] + [("self_draft", {"k": 1}), TREE]


def _static(lm, mode="static"):
    return dataclasses.replace(lm, compile_step=mode)


@pytest.fixture(scope="module")
def vanilla(tiny_lm):
    return {name: run_ids(tiny_lm, p, max_new_tokens=NEW)[0] for name, p in PROMPTS.items()}


# --- the switch -----------------------------------------------------------------------------------

def test_compile_choices_and_auto_by_device(monkeypatch):
    assert resolve_compile("auto", torch.device("cuda")) == "off"         # until a GPU run has measured it
    monkeypatch.setattr(static_step, "AUTO_ON", ("cuda",))
    assert resolve_compile("auto", torch.device("cuda")) == "on"
    assert resolve_compile("auto", torch.device("cpu")) == "off"
    assert [resolve_compile(c, torch.device("cpu")) for c in ("on", "off", "static")] == ["on", "off", "static"]
    for bad in ("yes", "", None, True):
        with pytest.raises(ModelLoadError) as err:
            compile_option(bad)
        assert "\n" not in str(err.value) and "compile: must be one of auto, on, off, static" in str(err.value)


def test_load_model_refuses_a_bad_compile_before_loading_and_records_the_step(tiny_lm_tok):
    with pytest.raises(ModelLoadError, match="compile: must be one of"):
        load_model("no-such-model-is-loaded", device="cpu", compile="fast")
    plain = load_model("tiny-random", device="cpu", dtype="float32")
    assert plain.runtime["compile"] == "off"                                      # auto on a CPU
    lm = load_model("tiny-random", device="cpu", dtype="float32", compile="static")
    assert lm.model is plain.model                         # one load serves every mode (the fixture's may
    assert lm.compile_step == "static" and lm.runtime["compile"] == "static"     # have left the cache)


def test_the_cli_takes_compile_and_refuses_a_bad_one(capsys):
    from specviz.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["generate", "hello", "--compile", "fast"])
    assert exc.value.code == 2
    assert "--compile: invalid choice: 'fast'" in capsys.readouterr().err


def test_the_cli_passes_compile_to_the_run_request():
    from specviz.cli import build_parser
    from specviz.cli.common import runtime_request

    for command in (["generate", "--prompt", "hi"], ["bench"], ["doctor"]):
        args = build_parser().parse_args(command + ["--compile", "static"])
        assert args.compile == "static"
        assert runtime_request(args).compile == "static"
        assert build_parser().parse_args(command).compile == "auto"


def test_a_trace_records_the_step(tiny_lm_tok):
    from specviz.core.trace import Trace
    from specviz.engine import generate

    trace = generate(_static(tiny_lm_tok), "hi", "prompt_lookup", decoding={"max_new_tokens": 4})
    assert trace.runtime["compile"] == "static"
    assert Trace.from_dict(trace.to_dict()).runtime["compile"] == "static"      # the schema takes it


# --- the cache ------------------------------------------------------------------------------------

def test_static_cache_commit_crop_and_view(tiny_lm):
    config = tiny_lm.model.config
    cache = StaticKV(config, 32, torch.device("cpu"), torch.float32)
    check_supported(cache)
    with torch.inference_mode():
        tiny_lm.model(input_ids=torch.tensor([[5, 9, 33, 12, 7, 40]]), past_key_values=cache, use_cache=True)
    assert length(cache) == 6
    keys = layer_kv(cache, 0)[0]
    assert keys.shape[2] == 32                              # the capacity; rows past the length are stale
    before = keys[:, :, [0, 1, 4]].clone()
    ptr = keys.data_ptr()
    commit(cache, 1, [2])                                   # keep rows 0, 1 (prefix + root) and node 2's row 4
    assert length(cache) == 3 and layer_kv(cache, 0)[0].data_ptr() == ptr    # in place, no reallocation
    assert torch.equal(layer_kv(cache, 0)[0][:, :, :3], before)
    assert CacheView(cache, 2).keys(0).shape[2] == 2
    crop_to(cache, 1)
    assert length(cache) == 1
    with pytest.raises(TypeError, match="written by the target's forward only"):
        kvcache.append(cache, 0, keys[:, :, :1], keys[:, :, :1])
    cache.grow(64)
    assert cache.capacity == 64 and layer_kv(cache, 0)[0].shape[2] == 64 and length(cache) == 1
    assert torch.equal(layer_kv(cache, 0)[0][:, :, :1], before[:, :, :1])


def test_buckets():
    assert [bucket(r) for r in (1, 3, 7, 64, 65, 97, 129)] == [1, 4, 8, 64, 128, 128, 192]
    assert BUCKETS == (1, 2, 4, 8, 16, 32, 64)


def test_one_cache_is_lent_at_a_time_and_reused(tiny_lm):
    first = generation_cache(tiny_lm.model, "static", 40, torch.device("cpu"), torch.float32)
    second = generation_cache(tiny_lm.model, "static", 40, torch.device("cpu"), torch.float32)
    assert isinstance(first, StaticKV) and isinstance(second, StaticKV) and first is not second
    release(second)
    release(first)
    again = generation_cache(tiny_lm.model, "static", 40, torch.device("cpu"), torch.float32)
    assert again is first                                   # given back: lent again (a compiled graph's addresses)
    release(again)
    assert type(generation_cache(tiny_lm.model, "off", 40, torch.device("cpu"), torch.float32)).__name__ == "DynamicCache"


def test_an_abandoned_generation_gives_its_cache_back(tiny_lm):
    lm = _static(tiny_lm)
    steps = generate_steps(lm, PROMPTS["loop"], "vanilla", None, DecodingConfig(max_new_tokens=8))
    next(steps)
    step = static_step.step_of(tiny_lm.model, False)
    assert step.lent
    steps.close()
    assert not step.lent


# --- lossless -------------------------------------------------------------------------------------

@pytest.mark.parametrize("drafter,config", CONFIGS, ids=[f"{d}-{c}" for d, c in CONFIGS])
def test_every_drafter_is_identical_to_vanilla_on_the_static_step(tiny_lm, vanilla, drafter, config):
    lm = _static(tiny_lm)
    for name, prompt in PROMPTS.items():
        out, steps = run_ids(lm, prompt, drafter, config, "off", max_new_tokens=NEW)
        assert out == vanilla[name], f"{drafter} {config} on the static step differs on {name!r}"


def test_medusa_reads_hidden_states_on_the_static_step(tiny_lm, vanilla, tmp_path, tmp_path_factory):
    """Medusa's heads read the target's final hidden state through forward hooks: its generation
    runs the static cache eagerly, and stays identical."""
    cfg = network_drafter_config(tiny_lm, "medusa", tmp_path, tmp_path_factory)
    for name, prompt in PROMPTS.items():
        assert run_ids(_static(tiny_lm), prompt, "medusa", cfg, max_new_tokens=NEW)[0] == vanilla[name]


def test_a_run_that_crosses_row_buckets(tiny_lm, vanilla):
    """Token recycling's trees of up to 80 nodes: forwards of small trees and of more rows than the
    cost grid's largest (64), which run in the bucket beyond it (128)."""
    cfg = {"size_by_cost": False, "init_from_prompt": True}
    out, steps = run_ids(_static(tiny_lm), PROMPTS["repetitive"], "token_recycling", cfg, max_new_tokens=NEW)
    assert out == vanilla["repetitive"]
    used = {bucket(tiny_lm.cost_model().padded_len(len(s.tree) + 1)) for s in steps}
    assert len(used) > 1 and max(used) > BUCKETS[-1], used


def test_a_cache_too_small_grows_with_a_warning(tiny_lm, vanilla, monkeypatch):
    monkeypatch.setattr(static_step, "HEADROOM", 0)
    monkeypatch.setattr(static_step, "CAPACITY_STEP", 1)
    monkeypatch.setattr(static_step, "_STEPS", type(static_step._STEPS)())     # a fresh, exactly sized cache
    with pytest.warns(UserWarning, match="static KV cache: a forward of .* grown to"):
        out, _ = run_ids(_static(tiny_lm), PROMPTS["repetitive"], *TREE, max_new_tokens=NEW)
    assert out == vanilla["repetitive"]


def test_a_run_to_the_models_full_context(tiny_lm):
    prompt = PROMPTS["repetitive"]
    full = dataclasses.replace(tiny_lm, max_positions=len(prompt) + NEW)
    ref, _ = run_ids(full, prompt, max_new_tokens=NEW)
    for drafter, cfg in (("vanilla", {}), TREE):
        out, steps = run_ids(_static(full), prompt, drafter, cfg, max_new_tokens=NEW)
        assert out == ref and steps[-1].stop == "length"


def test_sampling_draws_the_same_on_the_static_step(tiny_lm):
    prompt = PROMPTS["loop"]
    for drafter, cfg in (("vanilla", {}), TREE):
        ref, _ = run_ids(tiny_lm, prompt, drafter, cfg, max_new_tokens=24, temperature=0.8, seed=3)
        assert run_ids(_static(tiny_lm), prompt, drafter, cfg, max_new_tokens=24, temperature=0.8, seed=3)[0] == ref


def test_the_compiled_step_traces_once_per_bucket_and_stays_identical(tiny_lm, vanilla, monkeypatch):
    """torch.compile over the static step (dynamo's tracing with the eager backend, seconds; the
    inductor test below is slow): identical outputs, and a second generation compiles nothing."""
    from torch._dynamo.utils import counters

    step = static_step.step_of(tiny_lm.model, True)
    monkeypatch.setattr(step, "backend", "eager")
    monkeypatch.setattr(step, "forward", None)
    lm = _static(tiny_lm, "on")
    assert run_ids(lm, PROMPTS["loop"], max_new_tokens=NEW)[0] == vanilla["loop"]
    graphs = counters["stats"]["unique_graphs"]
    assert run_ids(lm, PROMPTS["loop"], max_new_tokens=NEW)[0] == vanilla["loop"]
    assert counters["stats"]["unique_graphs"] == graphs                 # the same bucket: no new graph
    assert run_ids(lm, PROMPTS["repetitive"], *TREE, max_new_tokens=NEW)[0] == vanilla["repetitive"]
    assert step.cache is not None and step.cache.capacity >= tiny_lm.max_positions    # the whole context: fixed shapes
    monkeypatch.setattr(step, "forward", None)


def test_warming_compiles_every_bucket_once(tiny_lm, vanilla, monkeypatch):
    """StaticStep.warm (what the first compiled lease on CUDA does): afterwards a tree drafter's
    run, whose trees take several buckets, compiles nothing more."""
    from torch._dynamo.utils import counters

    step = static_step.step_of(tiny_lm.model, True)
    monkeypatch.setattr(step, "backend", "eager")
    monkeypatch.setattr(step, "forward", None)
    monkeypatch.setattr(static_step, "WARM_ON", ("cpu",))
    monkeypatch.setattr(step, "warmed", False)
    warmed_at: list[int] = []
    warm = step.warm

    def counted(cache):
        warm(cache)
        warmed_at.append(counters["stats"]["unique_graphs"])

    monkeypatch.setattr(step, "warm", counted)
    lm = _static(tiny_lm, "on")
    out, steps = run_ids(lm, PROMPTS["repetitive"], *TREE, max_new_tokens=NEW)
    assert out == vanilla["repetitive"] and step.warmed and len(warmed_at) == 1
    assert len({bucket(tiny_lm.cost_model().padded_len(len(s.tree) + 1)) for s in steps}) > 1
    assert counters["stats"]["unique_graphs"] == warmed_at[0]          # every bucket at the lease, none after
    monkeypatch.setattr(step, "forward", None)


@pytest.mark.slow
def test_the_inductor_compiled_step_on_a_cpu(tiny_lm, vanilla, monkeypatch):
    """The real compile (inductor's C++ on a CPU; about a minute per row bucket on the shared CPU)."""
    step = static_step.step_of(tiny_lm.model, True)
    monkeypatch.setattr(step, "backend", "inductor")
    monkeypatch.setattr(step, "forward", None)
    lm = _static(tiny_lm, "on")
    assert run_ids(lm, PROMPTS["loop"], max_new_tokens=NEW)[0] == vanilla["loop"]
    assert run_ids(lm, PROMPTS["repetitive"], "prompt_lookup", {}, max_new_tokens=NEW)[0] == vanilla["repetitive"]
    monkeypatch.setattr(step, "forward", None)


# --- the GPU kit's benchmark, dry-run on the CPU --------------------------------------------------

def _bench_module():
    spec = importlib.util.spec_from_file_location("compiled_step", ROOT / "benchmarks" / "compiled_step.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_the_kits_benchmark_dry_runs_on_a_cpu(tiny_lm_tok, tmp_path):
    import json

    rc = _bench_module().main(["--device", "cpu", "--model", "tiny-random", "--max-new-tokens", "4", "--runs", "2",
                               "--modes", "off,static", "--methods", "vanilla,prompt_lookup,eagle", "--out", str(tmp_path)])
    assert rc == 0
    result = json.loads((tmp_path / "compiled-step.json").read_text())
    assert set(result["vanilla"]) == {"off", "static"} and result["info"]["modes"]["static"] == "static"
    assert all(v["vanilla_identical"] and v["tokens_per_s"] > 0 and len(v["all"]) == 2 for v in result["vanilla"].values())
    assert result["identity"]["prompt_lookup"] == {"identical": True, "first_difference": None}
    assert "skipped" in result["identity"]["eagle"]         # no eagle head for tiny-random: said, not fatal
    assert "| static | static |" in (tmp_path / "compiled-step.md").read_text()


@pytest.mark.slow
def test_the_device_script_runs_the_compiled_stage_on_a_cpu(tmp_path):
    env = {**os.environ, "NO_SETUP": "1", "DEVICE": "cpu", "MODEL": "tiny-random", "OUT": str(tmp_path),
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    run = subprocess.run(["bash", "benchmarks/gpu/device.sh", "compiled", "--max-new-tokens", "4", "--runs", "1",
                          "--modes", "off,static", "--methods", "prompt_lookup"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (tmp_path / "compiled-step.json").exists() and (tmp_path / "compiled-step.md").exists()
