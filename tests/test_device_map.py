"""Device maps (specviz/models/placement.py, models.load_model(device_map=...)): a target split by
accelerate across the CPU and disk offload (all a machine without GPUs allows) decodes exactly
as the same model on one device, greedy and sampling, for a chain drafter (prompt_lookup), a
tree drafter (ngram_trie) and model drafters (Medusa / Hydra heads); the trace records the
map; bad maps and budgets end in one line. Where a decision involves GPUs (which device a
module runs on, which GPU indices exist) torch.cuda is mocked, as in tests/test_precision.py.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from specviz.models import placement
from specviz.core.decoding import DecodingConfig
from specviz.engine import generate
from specviz.errors import ModelLoadError
from specviz.heads import checkpoint as heads_ckpt
from specviz.heads.model import DraftHeads, HeadsSpec
from specviz.models import load_model
from specviz.models.prompts import build_prompt
from specviz.core.trace import Trace

from conftest import run_cli

SPLIT = {"model.embed_tokens": "cpu", "model.rotary_emb": "cpu", "model.layers.0": "cpu",
         "model.layers.1": "disk", "model.norm": "cpu", "lm_head": "cpu"}
TEXT = "the cat sat on the mat. the cat sat on the mat. the dog sat on the"


@pytest.fixture(scope="module")
def single():
    """tiny-random on one device, without the few-row linear (a split model has none)."""
    return load_model("tiny-random", device="cpu", dtype="float32", cpu_linear=False)


@pytest.fixture(scope="module")
def split(single, tmp_path_factory):
    """The same weights split over CPU memory and disk. It shares the one-device model's verify
    cost model: drafters that size their trees by the (timed) cost would otherwise draft other
    trees, and under sampling other trees draw other (equally lossless) samples."""
    lm = load_model("tiny-random", dtype="float32", device_map=SPLIT,
                    offload_folder=str(tmp_path_factory.mktemp("offload")))
    return dataclasses.replace(lm, verify_cost=single.cost_model())


@pytest.fixture(scope="module")
def prompt(single):
    return build_prompt(single.tokenizer, TEXT)


@pytest.fixture
def split_map_file(tmp_path) -> Path:
    """SPLIT written as a JSON map file (tmp_path / "map.json"), as --device-map takes it."""
    map_file = tmp_path / "map.json"
    map_file.write_text(json.dumps(SPLIT))
    return map_file


def test_the_split_really_offloads_a_layer_to_disk(split):
    layer1 = split.model.model.layers[1]
    assert {p.device.type for p in layer1.parameters()} == {"meta"}      # weights live on disk
    assert split.device == torch.device("cpu")
    assert split.runtime["device_map"] == SPLIT
    assert split.cpu_linear is False


@pytest.mark.parametrize("drafter", ["vanilla", "prompt_lookup", "ngram_trie"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_split_target_decodes_as_one_device(single, split, prompt, drafter, temperature):
    decoding = DecodingConfig(max_new_tokens=24, temperature=temperature, seed=3)
    one = generate(single, prompt, drafter, None, decoding)
    two = generate(split, prompt, drafter, None, decoding)
    assert two.output_ids == one.output_ids
    if temperature == 0.0:         # greedy: identical to vanilla on one device too
        assert two.output_ids == generate(single, prompt, "vanilla", None, decoding).output_ids
    assert [s.accepted for s in two.steps] == [s.accepted for s in one.steps]


@pytest.mark.parametrize("kind", ["medusa", "hydra"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_heads_on_a_split_target(single, split, prompt, tmp_path, kind, temperature):
    torch.manual_seed(0)
    heads = DraftHeads(HeadsSpec(kind, 3, 1, int(single.model.config.hidden_size), 64), single.model)
    for p in heads.parameters():
        torch.nn.init.normal_(p, std=0.3)
    heads.set_vocab(torch.randperm(single.vocab_size)[:64])
    path = tmp_path / f"{kind}.pt"
    heads_ckpt.save(path, heads, heads_ckpt.manifest_for(heads, single.model_id))
    decoding = DecodingConfig(max_new_tokens=16, temperature=temperature, seed=5)
    cfg = {"checkpoint": str(path), "tree": "chain", "size_by_cost": False, "min_path": 0.0}
    one = generate(single, prompt, kind, cfg, decoding)
    two = generate(split, prompt, kind, cfg, decoding)
    assert not two.errors and two.output_ids == one.output_ids
    assert any(len(s.tree) for s in two.steps)                    # the heads did draft
    if temperature == 0.0:
        assert two.output_ids == generate(single, prompt, "vanilla", None, decoding).output_ids


def test_trace_records_the_map_and_old_traces_still_read(split, prompt):
    trace = generate(split, prompt, "prompt_lookup", None, DecodingConfig(max_new_tokens=6))
    back = Trace.from_json(trace.to_json())
    assert back.runtime["device_map"] == SPLIT
    old = trace.to_dict()
    del old["runtime"]["device_map"]                             # a trace from before device maps
    assert "device_map" not in Trace.from_dict(old).runtime
    bad = trace.to_dict()
    bad["runtime"]["device_map"] = {"lm_head": 0}                 # devices are recorded as strings
    with pytest.raises(Exception, match="device_map"):
        Trace.from_dict(bad)


def test_a_local_folder_loads_by_a_json_map_through_from_pretrained(single, prompt, tmp_path, split_map_file):
    folder = tmp_path / "tiny"
    single.model.save_pretrained(folder)
    single.tokenizer.save_pretrained(folder)
    lm = load_model(str(folder), dtype="float32", device_map=str(split_map_file),
                    offload_folder=str(tmp_path / "off"))
    assert lm.runtime["device_map"]["model.layers.1"] == "disk"
    decoding = DecodingConfig(max_new_tokens=12)
    assert generate(lm, prompt, "ngram_trie", None, decoding).output_ids == \
        generate(single, prompt, "vanilla", None, decoding).output_ids


def test_a_budget_that_cannot_hold_the_model_is_refused(single, prompt, tmp_path):
    """The tiny model's weights are 24.3 MiB. Without GPUs accelerate plans it whole (cpu or disk);
    a budget that holds none of it is refused, with an offload folder or not."""
    with pytest.raises(ModelLoadError, match=r"max_memory: the budget cpu=200KB holds none of the model \(24\.3 MiB of weights in float32"):
        load_model("tiny-random", dtype="float32", device_map="auto", max_memory="cpu=200KB")
    with pytest.raises(ModelLoadError, match=r"holds none of the model .*raise --max-memory"):
        load_model("tiny-random", dtype="float32", device_map="sequential", max_memory="cpu=20MB",
                   offload_folder=str(tmp_path))
    lm = load_model("tiny-random", dtype="float32", device_map="balanced", max_memory="cpu=64MB")
    assert lm.runtime["device_map"] == {"": "cpu"}
    decoding = DecodingConfig(max_new_tokens=10)
    assert generate(lm, prompt, "prompt_lookup", None, decoding).output_ids == \
        generate(single, prompt, "vanilla", None, decoding).output_ids


@pytest.mark.parametrize("kwargs, message", [
    ({"device_map": {"model.layers.7": "cpu", **SPLIT}}, r"no module named 'model.layers.7' in LlamaForCausalLM"),
    ({"device_map": {"model.layers.0": "cpu"}}, r"does not give any device .*give every module a device"),
    ({"device_map": {**SPLIT, "lm_head": "gpu"}}, r"unknown device 'gpu'"),
    ({"device_map": {**SPLIT, "lm_head": 1}}, r"GPU 1 asked for, but torch sees no GPUs"),
    ({"device_map": '{"lm_head": "cpu",'}, r"not valid JSON"),
    ({"device_map": "./no-such-map.json"}, r"neither a strategy .* nor a JSON file"),
    ({"device_map": SPLIT}, r"offloads modules to 'disk'; give --offload-folder"),
    ({"device_map": "auto", "max_memory": "cpu"}, r"expected DEVICE=SIZE"),
    ({"device_map": "auto", "max_memory": "cpu=lots"}, r"'lots' for cpu is not a size"),
    ({"device_map": "auto", "device": "cpu"}, r"leave --device at auto"),
    ({"max_memory": "cpu=1GB"}, r"add --device-map auto"),
    ({"device_map": "auto", "cpu_linear": True}, r"cpu_linear: on .* use auto or off with --device-map"),
])
def test_bad_maps_are_one_line_errors(kwargs, message):
    with pytest.raises(ModelLoadError, match=message) as err:
        load_model("tiny-random", dtype="float32", **kwargs)
    assert "\n" not in str(err.value)


def test_a_model_drafter_refuses_an_offloaded_lm_head(single):
    class Meta:                                                   # an LM head accelerate offloaded
        weight = torch.empty(4, 4, device="meta")
    target = type("T", (), {"get_input_embeddings": lambda self: single.model.get_input_embeddings(),
                            "get_output_embeddings": lambda self: Meta()})()
    with pytest.raises(placement.DeviceMapError, match="map lm_head to a GPU"):
        placement.check_resident(target, "draft heads")


# --- GPU decisions, mocked ------------------------------------------------------------------------

@pytest.fixture
def two_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_gpu_names_are_checked_against_the_gpus_torch_sees(two_gpus):
    assert placement.device_name(1) == 1 and placement.device_name("0") == 0
    assert placement.device_name("cuda:1") == 1 and placement.device_name("cuda") == 0
    with pytest.raises(placement.DeviceMapError, match="GPU 2 asked for, but torch sees 2 GPUs"):
        placement.device_name("cuda:2")
    assert placement.parse_max_memory("0=20GiB, 1=20GiB,cpu=60GiB") == {0: "20GiB", 1: "20GiB", "cpu": "60GiB"}
    for twice in ("cpu=1GB,cpu=2GB", "0=1GB,cuda:0=2GB"):     # the last size won, unsaid
        with pytest.raises(placement.DeviceMapError, match="is given twice"):
            placement.parse_max_memory(twice)


def test_execution_devices_follow_accelerates_rule(single):
    """A module mapped to a GPU runs there; one mapped to cpu or disk beside GPUs is offloaded and
    runs on the main (first) GPU; the engine's input ids go to the embedding's device, logits come
    from the LM head's; the longest mapped prefix owns a submodule."""
    from accelerate import init_empty_weights
    from transformers import AutoModelForCausalLM

    with init_empty_weights():
        model = AutoModelForCausalLM.from_config(single.model.config)
    model.hf_device_map = {"model.embed_tokens": 1, "model.rotary_emb": 1, "model.layers.0": 1,
                           "model.layers.1": 0, "model.norm": "cpu", "lm_head": "disk"}
    assert placement.main_device(model.hf_device_map) in (torch.device("cuda", 0), torch.device("cuda", 1))
    main = placement.main_device(model.hf_device_map)
    assert placement.input_device(model) == torch.device("cuda", 1)
    assert placement.execution_device(model, model.model.layers[1].self_attn.q_proj) == torch.device("cuda", 0)
    assert placement.execution_device(model, model.model.norm) == main
    assert placement.output_device(model) == main
    assert placement.main_device({"": "cpu", "x": "disk"}) == torch.device("cpu")


def test_an_accelerate_hook_decides_first(single):
    from accelerate.hooks import AlignDevicesHook, add_hook_to_module

    layer = torch.nn.Linear(2, 2)
    add_hook_to_module(layer, AlignDevicesHook(execution_device=torch.device("cpu")))
    layer._hf_hook.execution_device = torch.device("cuda", 3)     # what a GPU map's hook holds
    assert placement.execution_device(single.model, layer) == torch.device("cuda", 3)


def test_heads_go_to_the_device_of_what_they_read(single, monkeypatch, tmp_path):
    """Medusa heads read the final norm's output: they are placed on its execution device."""
    seen = []
    monkeypatch.setattr(heads_ckpt, "execution_device", lambda model, module: seen.append(module) or torch.device("cpu"))
    heads = DraftHeads(HeadsSpec("medusa", 2, 1, int(single.model.config.hidden_size), 16), single.model)
    heads.set_vocab(torch.arange(16))
    path = tmp_path / "h.pt"
    heads_ckpt.save(path, heads, heads_ckpt.manifest_for(heads, single.model_id))
    heads_ckpt.load(path, single.model, single.model_id)
    assert seen == [single.model.model.norm]


# --- the command line ------------------------------------------------------------------------------

def test_generate_with_a_map_file_records_it(tmp_path, split_map_file):
    trace = tmp_path / "t.json"
    done = run_cli("generate", "--model", "tiny-random", "--drafter", "prompt_lookup", "--max-new-tokens", "8",
                   "--device-map", str(split_map_file), "--offload-folder", str(tmp_path / "off"),
                   "--prompt", TEXT, "--trace", str(trace))
    assert done.returncode == 0, done.stderr
    assert json.loads(trace.read_text())["runtime"]["device_map"]["model.layers.1"] == "disk"


def test_cli_bad_map_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = run_cli("generate", "--model", "tiny-random", "--device-map", str(bad), "--prompt", "hi")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "not valid JSON" in lines[0], done.stderr


# --- the explorer's model box ---------------------------------------------------------------------

def test_explorer_device_map_box(panel):
    from specviz.errors import ConfigError
    from specviz.ui import runner

    import dataclasses

    def request(**given):
        return panel.request(panel.form(model="tiny-random", drafter="prompt_lookup",
                                        message="the cat sat on the mat. the cat sat on the", **given))

    assert request().device_map is None                            # the page before device maps
    req = request(dtype="float32", device_map='{"": "cpu"}', max_memory="")
    assert (req.device_map, req.max_memory, req.dtype) == ('{"": "cpu"}', None, "float32")
    assert dataclasses.replace(req, drafter="vanilla", settings=()).device_map == req.device_map
    assert runner.device_map_note(req, gpus=0) == ""                  # an explicit map: no note
    assert "does nothing on this machine" in runner.device_map_note(request(device_map="auto"), gpus=0)
    assert runner.device_map_note(request(device_map="auto"), gpus=2) == ""
    trace = runner.run_to_end(req)
    assert trace.runtime["device_map"] == {"": "cpu"} and trace.output_ids
    with pytest.raises(ConfigError, match="not a file name"):
        request(dtype="float32", device_map="/etc/map.json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        request(dtype="float32", device_map='{"lm_head": ')
    with pytest.raises(ConfigError, match="budgets a device map"):
        request(dtype="float32", max_memory="cpu=1GB")


def test_bench_records_the_map_in_results_json(tmp_path, split_map_file):
    out = tmp_path / "bench"
    done = run_cli("bench", "--model", "tiny-random", "--device-map", str(split_map_file), "--offload-folder",
                   str(tmp_path / "off"), "--drafters", "prompt_lookup", "--peers", "", "--categories",
                   "summarization", "--limit", "1", "--max-new-tokens", "8", "--warmup", "0", "--out", str(out))
    assert done.returncode == 0, done.stderr
    meta = json.loads((out / "results.json").read_text())["meta"]
    assert meta["runtime"]["device_map"] == SPLIT


def test_doctor_checks_a_split_target(tmp_path):
    from specviz.analysis.doctor import format_report, run_doctor

    report = run_doctor("tiny-random", dtype="float32", drafters=("prompt_lookup",), max_new_tokens=8,
                        n_prompts=1, rows=(1, 2), device_map=json.dumps(SPLIT), offload_folder=str(tmp_path))
    assert report.ok and report.checks[0].mismatches == 0
    assert report.device_map == SPLIT and "model.layers.1=disk" in format_report(report)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_glide_on_a_split_target(single, split, prompt, tmp_path_factory, temperature):
    """GLIDE's draft sits on the device of the layer whose KV cache it reads (here the
    disk-offloaded last layer, which runs on the CPU) and decodes as on one device."""
    from specviz.glide.train import TrainConfig, train

    path = tmp_path_factory.mktemp("glide") / "glide.pt"
    gen = torch.Generator().manual_seed(0)
    batches = (torch.randint(3, 200, (2, 7), generator=gen).repeat(1, 4) for _ in range(2))
    train(single.model, single.model_id, batches, TrainConfig(steps=2, warmup=1), path, progress=False)
    decoding = DecodingConfig(max_new_tokens=12, temperature=temperature, seed=7)
    cfg = {"checkpoint": str(path)}
    one = generate(single, prompt, "glide", cfg, decoding)
    two = generate(split, prompt, "glide", cfg, decoding)
    assert not two.errors and two.output_ids == one.output_ids
    assert [s.accepted for s in two.steps] == [s.accepted for s in one.steps]
    assert any(len(s.tree) for s in two.steps)                    # the draft did draft
    if temperature == 0.0:
        assert two.output_ids == generate(single, prompt, "vanilla", None, decoding).output_ids
