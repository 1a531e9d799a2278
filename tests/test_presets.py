"""Drafter presets: `NAME@PRESET[key=value;...]` parsed once (drafters.choice) and accepted by
the CLI, bench and the explorer's settings form; each `paper` preset holds the paper's
constants with its citation and turns every extension off."""
from __future__ import annotations

import json

import pytest
from conftest import bench_one_question

from specviz import cli
from specviz.cli.drafters import drafters_markdown
from specviz.bench.methods import MethodError, expand_sweep, parse_methods
from specviz.drafters import REGISTRY, get
from specviz.drafters.kit.choice import DrafterChoice, DrafterChoiceError, parse_choice
from specviz.errors import UnknownDrafterError
from specviz.core.settings import describe

# ---- parsing ----------------------------------------------------------------------------------


def test_parse_forms():
    assert parse_choice("ngram_trie") == DrafterChoice("ngram_trie")
    c = parse_choice(" ngram_trie@paper[num_draft=16; n=12] ")
    assert (c.name, c.preset, c.overrides) == ("ngram_trie", "paper", (("num_draft", "16"), ("n", "12")))
    assert c.label == "ngram_trie@paper[num_draft=16;n=12]"
    values = c.values({"prefix_len": "4", "n": "12"})           # preset, then overrides, then extra
    assert values["insert_output"] is False and values["num_draft"] == "16" and values["prefix_len"] == "4"
    with pytest.raises(DrafterChoiceError, match=r"n=12 in the brackets and --set n=14"):
        c.values({"n": "14"})                                    # a contradiction is refused, not dropped
    cfg = c.config()
    assert (cfg.num_draft, cfg.n, cfg.prefix_len, cfg.size_by_cost) == (16, 12, 3, False)
    assert parse_choice("glide[gamma=2]").config().gamma == 2


@pytest.mark.parametrize("text, error, needle", [
    ("ngram_trie@nope", DrafterChoiceError, "its presets: paper"),
    ("vanilla@paper", DrafterChoiceError, "its presets: none"),
    ("nope@paper", UnknownDrafterError, "available:"),
    ("ngram_trie@paper[num_draft]", DrafterChoiceError, "key=value"),
    ("ngram_trie@paper[num_draft=0]", DrafterChoiceError, "num_draft"),
    ("ngram_trie@paper[typo=1]", DrafterChoiceError, "typo"),
    ("ngram_trie@paper[num_draft=1", DrafterChoiceError, "expected name"),
    ("ngram_trie@", DrafterChoiceError, "expected name"),
    ("@paper", DrafterChoiceError, "expected name"),
])
def test_bad_choices_name_what_is_wrong(text, error, needle):
    with pytest.raises(error) as err:
        parse_choice(text)
    assert needle in str(err.value)


# ---- the papers' constants -------------------------------------------------------------------

PAPER = {
    "ngram_trie": ({"n": 13, "prefix_len": 3, "num_draft": 8, "insert_output": False,
                    "recency_ties": False, "size_by_cost": False},
                   ("section 4.4", "Table 2", "section 4.7", "Table 3", "Appendix B")),
    "glide": ({"gamma": 4, "cape": True, "cape_bins": "0.3:7,0.6:5,0.8:3,1:1", "max_verify": 32,
               "beam": 0, "adaptive": False}, ("glideModel.py line 1482", "section 4.2", "section 5.3",
                                               "--bin 8 8 8 6 6 6 4 4 2 2 2 2")),
    "hierarchy": ({"level": 5, "draft_set": 7, "lookahead": True, "lookahead_window": 7, "recycle": False,
                   "size_by_cost": False, "corpus_span": 2},
                  ("section 3.2", "parallel decoding", "zomss/Hierarchy_Drafting")),
    "aded": ({"iterations": 150, "depth": 4, "candidates": 24, "c1": 32.0, "c2": 8.0, "increment": 0.04,
              "cap": 3.0, "window": 16, "adapt_prompt": False, "size_by_cost": False, "reset": False},
             ("Configuration of ADED", "t = 12", "mcts_sub.rs", "Fig. 4a")),
    "lookahead": ({"level": 5, "window": 15, "guess_set": 15, "pool_prompt": False},
                  ("Configuration of Baselines", "WIN 15", "GUESS 15")),
}


@pytest.mark.parametrize("name", sorted(PAPER))
def test_paper_presets_hold_the_papers_constants(name):
    expected, cited = PAPER[name]
    preset = get(name).presets["paper"]
    assert dict(preset.values) == {**dict(preset.values), **expected}
    assert {k: preset.values[k] for k in expected} == expected
    for part in cited:
        assert part in preset.source, (name, part)
    config = parse_choice(f"{name}@paper").config()
    for key, value in expected.items():
        assert getattr(config, key) == value


@pytest.mark.parametrize("name", ["eagle", "eagle3"])
def test_eagle_presets_cite_where_each_setting_comes_from(name):
    """`paper` is EaModel.from_pretrained's defaults (60/7/10), not the MT-bench scripts'; those are
    their own presets: 60/5/10, and 32/8/4 for Qwen3 targets (SafeAILab/EAGLE eagle/evaluation/)."""
    presets = get(name).presets
    want = {"paper": ({"total_tokens": 60, "depth": 7, "top_k": 10}, "EaModel.from_pretrained"),
            "paper-mtbench": ({"total_tokens": 60, "depth": 5, "top_k": 10}, "gen_ea_answer_{vicuna,llama2chat"),
            "paper-mtbench-qwen3": ({"total_tokens": 32, "depth": 8, "top_k": 4}, "gen_ea_answer_qwen3.py")}
    for preset, (values, cited) in want.items():
        fr_spec_off = {"hot_vocab": 0} if name == "eagle" else {}       # eagle3 has its own draft vocabulary
        assert dict(presets[preset].values) == {**values, "size_by_cost": False, "stop_early": False, **fr_spec_off}
        assert cited in presets[preset].source and "evaluation scripts" not in presets[preset].source
        config = parse_choice(f"{name}@{preset}").config()
        assert (config.total_tokens, config.depth, config.top_k) == tuple(values.values())


def test_other_presets():
    glide = get("glide").presets
    assert glide["paper-beam"].values["beam"] == 4 and glide["paper-beam"].values["gamma"] == 5
    assert "Table 3" in glide["paper-beam"].source
    assert glide["paper-glide"].values["gamma"] == 5 and not glide["paper-glide"].values["cape"]
    assert "section 5.1" in glide["paper-glide"].source
    spec_bench = get("lookahead").presets["specbench"]
    assert {k: spec_bench.values[k] for k in ("level", "window", "guess_set")} == {"level": 5, "window": 7,
                                                                                 "guess_set": 7}
    assert "section 4.1.1" in spec_bench.source


@pytest.mark.parametrize("name", sorted(n for n in REGISTRY if "paper" in REGISTRY[n].presets))
def test_paper_presets_turn_every_extension_off_and_defaults_keep_them(name):
    """A setting whose help calls it an extension is on by default and off in the paper preset."""
    preset = REGISTRY[name].presets["paper"]
    extensions = [i for i in describe(REGISTRY[name].config_cls) if i.type is bool and "extension" in i.help]
    for info in extensions:
        assert info.default is True, (name, info.name)
        assert preset.values.get(info.name) is False, (name, info.name)
    sizes = [i for i in describe(REGISTRY[name].config_cls) if i.type is int and "extension" in i.help]
    for info in sizes:                          # a size whose 0 turns an extension off (FR-Spec's hot_vocab)
        assert info.default != 0 and "0:" in info.help, (name, info.name)
        assert preset.values.get(info.name) == 0, (name, info.name)


def test_a_broken_preset_fails_at_registration():
    from specviz.drafters.kit.base import DrafterSpec, Preset
    from specviz.errors import ConfigError
    spec = get("ngram_trie")
    with pytest.raises(ConfigError):
        DrafterSpec("x", spec.config_cls, spec.factory, "s", "r", presets={"bad": Preset({"num_draft": 0}, "-")})


# ---- CLI -------------------------------------------------------------------------------------


def test_cli_generate_with_a_preset_and_overrides(capsys, tmp_path):
    path = tmp_path / "t.json"
    code = cli.main(["generate", "--model", "tiny-random", "--prompt", "hello there",
                     "--drafter", "ngram_trie@paper[num_draft=16]", "--set", "n=12",
                     "--max-new-tokens", "6", "--trace", str(path)])
    capsys.readouterr()
    assert code == 0
    trace = json.loads(path.read_text())
    config = trace["drafter_config"]
    assert trace["drafter"] == "ngram_trie"
    assert (config["num_draft"], config["n"], config["insert_output"], config["recency_ties"],
            config["size_by_cost"]) == (16, 12, False, False, False)


@pytest.mark.parametrize("drafter, needle", [("ngram_trie@nope", "its presets: paper"),
                                             ("ngram_trie@paper[num_draft]", "key=value")])
def test_cli_bad_preset_is_a_usage_error(capsys, drafter, needle):
    code = cli.main(["generate", "--model", "tiny-random", "--prompt", "hi", "--drafter", drafter])
    _, err = capsys.readouterr()
    assert code == 2 and "--drafter" in err and needle in err and "Traceback" not in err


def test_cli_drafters_lists_presets_with_sources(capsys):
    assert cli.main(["drafters"]) == 0
    out, _ = capsys.readouterr()
    assert "preset ngram_trie@paper: n=13, prefix_len=3, num_draft=8" in out
    assert "Appendix B" in out and "preset glide@paper-beam" in out
    assert cli.main(["drafters", "--json"]) == 0
    listing = {d["name"]: d for d in json.loads(capsys.readouterr()[0])}
    assert listing["aded"]["presets"][0]["name"] == "paper" and listing["vanilla"]["presets"] == []
    assert "| `hierarchy@paper` |" in drafters_markdown()


# ---- bench -----------------------------------------------------------------------------------


def test_bench_accepts_presets_with_overrides():
    methods, _ = parse_methods("ngram_trie@paper,ngram_trie@paper[num_draft=16],ngram_trie", "")
    labels = [m.label for m in methods]
    assert labels == ["vanilla", "ngram_trie@paper", "ngram_trie@paper[num_draft=16]", "ngram_trie"]
    paper = dict(methods[1].settings)
    assert paper["num_draft"] == 8 and paper["insert_output"] is False
    assert dict(methods[2].settings)["num_draft"] == "16"
    assert methods[3].settings == ()
    assert get("ngram_trie").config(dict(methods[2].settings)).num_draft == 16
    with pytest.raises(MethodError, match="its presets"):
        parse_methods("ngram_trie@nope", "")
    with pytest.raises(MethodError, match="given twice"):
        parse_methods("ngram_trie@paper,ngram_trie@paper", "")


def test_bench_sweeps_from_a_preset():
    methods, refused = expand_sweep("ngram_trie@paper:num_draft=8,32;prefix_len=3")
    assert [m.label for m in methods] == ["ngram_trie@paper[num_draft=8;prefix_len=3]",
                                          "ngram_trie@paper[num_draft=32;prefix_len=3]"]
    assert all(dict(m.settings)["size_by_cost"] is False for m in methods)
    assert refused == []
    # the preset's n is 13: prefix_len=13 is in no valid combination, a mistake refused up front
    with pytest.raises(MethodError, match="prefix_len=13 is in no valid combination"):
        expand_sweep("ngram_trie@paper:num_draft=8,32;prefix_len=3,13")


def test_bench_runs_a_preset_with_its_store(tiny_lm_tok, monkeypatch):
    from specviz.engine import service
    stores = []
    original = service.run

    def spy(request, **options):
        stores.append(options.get("store"))
        return original(request, **options)

    monkeypatch.setattr(service, "run", spy)
    bench, runs = bench_one_question(tiny_lm_tok, "ngram_trie@paper", "", 6, "hello there, general")
    assert [r.method for r in runs] == ["vanilla", "ngram_trie@paper"]
    assert runs[0].output_ids == runs[1].output_ids
    assert stores and all(s is bench.store for s in stores)     # one store for the whole run


# ---- explorer: the preset dropdown fills the settings form ------------------------------------


def test_explorer_preset_fills_the_settings_form():
    gr = pytest.importorskip("gradio")
    from specviz.ui.setup_panel import DEFAULTS, build_setup_panel, preset_names, preset_note, preset_updates

    with gr.Blocks():
        panel = build_setup_panel()
    form = panel.drafter_form
    assert preset_names("glide") == [DEFAULTS, "paper", "paper-glide", "paper-beam"]
    assert preset_names("vanilla") == [DEFAULTS]
    updates = preset_updates(form, "ngram_trie", "paper")
    assert len(updates) == len(form.components)
    filled = {s: u["value"] for (g, s), u in zip(form.keys, updates) if g == "ngram_trie"}
    assert filled["num_draft"] == 8 and filled["insert_output"] is False and filled["n"] == 13
    assert filled["first_prior"] == 0.3                            # not in the preset: its default
    assert all(not isinstance(u, dict) or "value" not in u
               for (g, _), u in zip(form.keys, updates) if g != "ngram_trie")
    # the form's values, as gradio would pass them (by name), make a RunRequest with the preset's settings
    filled_values = {s: u["value"] for (g, s), u in zip(form.keys, updates) if g == "ngram_trie"}
    request = panel.request(panel.form(model="tiny-random", drafter="ngram_trie", message="hi", **filled_values))
    settings = dict(request.settings)
    assert settings["num_draft"] == 8 and settings["size_by_cost"] is False and request.drafter == "ngram_trie"
    back = {s: u["value"] for (g, s), u in zip(form.keys, preset_updates(form, "ngram_trie", DEFAULTS))
            if g == "ngram_trie"}
    assert back["num_draft"] == 16 and back["insert_output"] is True
    assert "Appendix B" in preset_note("ngram_trie", "paper") and preset_note("ngram_trie", DEFAULTS) == ""


def test_explorer_api_accepts_a_preset(tiny_lm):
    from specviz.core.decoding import DecodingConfig
    from specviz.drafters.kit.store import DrafterStore
    from specviz.engine.service import RunRequest
    from specviz.ui import runner

    request = RunRequest("tiny-random", "ngram_trie@paper", (("num_draft", 4),), "settings",
                         DecodingConfig(max_new_tokens=5), "hello")
    plan = runner.prepare(request)
    assert plan.spec.name == "ngram_trie" and dict(plan.values)["num_draft"] == 4
    assert dict(plan.values)["insert_output"] is False
    trace = runner.run_to_end(request, plan, DrafterStore())
    assert trace.drafter == "ngram_trie" and trace.drafter_config["num_draft"] == 4


# ---- every preset is lossless -----------------------------------------------------------------

PRESET_RUNS = [(n, p) for n in sorted(REGISTRY) for p in REGISTRY[n].presets if n not in ("glide", "medusa", "hydra", "eagle", "eagle3", "mtp")]


@pytest.mark.parametrize("name, preset", PRESET_RUNS, ids=[f"{n}@{p}" for n, p in PRESET_RUNS])
def test_every_preset_is_greedy_identical_to_vanilla(tiny_lm, name, preset):
    """(glide's, medusa's, hydra's, eagle's, eagle3's and mtp's presets run in tests/test_glide.py /
    test_heads.py / test_eagle.py / test_mtp.py: they need a checkpoint.)"""
    from conftest import run_ids

    prompt = [5, 6, 7, 8, 9] * 4 + [11, 12]
    vanilla, _ = run_ids(tiny_lm, prompt, max_new_tokens=32)
    out, steps = run_ids(tiny_lm, prompt, name, parse_choice(f"{name}@{preset}").config(), max_new_tokens=32)
    assert out == vanilla
    assert not any("drafter_error" in s.info for s in steps)
