"""The typed contracts between the engine, the drafters and the front ends:

- what a drafter needs (`DrafterNeeds`: the target's hidden state, its top-k width, feature
  rows) drives the engine: asked for, it is given; not asked for, it is not; a plugin that
  declares nothing, or declares it the old way (loose attributes), still runs;
- StepRecord is built with keywords only, and the trace format is unchanged by it;
- how a step is told comes from the drafter's spec (`DrafterSpec.narrate`), not from the
  explainer guessing the drafter from its notes;
- the explainers and analyses (viz/, analysis/) name no drafter: they ask the registry
  (`baseline()`, the `preselected` flags).
"""
from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import drafter_literals, hand_trace, run_ids

from specviz.core.narration import Place, Quote, Scene, StepStory
from specviz.core.settings import Settings
from specviz.core.trace import StepRecord, Trace
from specviz.core.tree import DraftTree
from specviz.drafters import REGISTRY, DrafterSpec, ordered
from specviz.drafters.kit.base import NO_NEEDS, DrafterNeeds, needs_of
from specviz.engine.verify import TOP_K
from specviz.models.hidden import FINAL
from specviz.viz.narrative import step_narrative

ROOT = Path(__file__).resolve().parent.parent
PROMPT = [5, 6, 7, 8, 9, 10, 11, 12]
LANDING = ROOT / "specviz" / "data" / "traces" / "landing.json"


@dataclasses.dataclass(frozen=True)
class _NoSettings(Settings):
    pass


class _Spy:
    """Drafts nothing; records what the engine handed it at each step."""
    needs = NO_NEEDS

    def __init__(self, config: Any, setup: Any) -> None:
        self.hidden: list[Any] = []
        self.features: list[Any] = []
        self.topk: list[tuple[tuple[int, ...], ...]] = []

    def propose(self, ctx: Any) -> DraftTree:
        self.hidden.append(ctx.hidden)
        self.features.append(ctx.features)
        return DraftTree.empty()

    def observe(self, step: Any) -> None:
        self.topk.append(step.target_topk)


def _spied(cls: type) -> tuple[DrafterSpec, list[Any]]:
    """A spec (not registered: the engine takes it as is) whose drafters are kept for the test."""
    made: list[Any] = []

    def make(config: Any, setup: Any) -> Any:
        made.append(cls(config, setup))
        return made[-1]
    return DrafterSpec("contract_spy", _NoSettings, make, "test only"), made


def _run(tiny_lm: Any, cls: type) -> Any:
    spec, made = _spied(cls)
    out, _ = run_ids(tiny_lm, PROMPT, spec, max_new_tokens=6)  # type: ignore[arg-type]
    vanilla, _ = run_ids(tiny_lm, PROMPT, max_new_tokens=6)
    assert out == vanilla and len(made) == 1
    return made[0]


# ---- what a drafter needs drives the engine ----------------------------------------------

def test_a_drafter_that_needs_nothing_gets_no_hidden_state_and_the_default_top_k(tiny_lm) -> None:
    spy = _run(tiny_lm, _Spy)
    assert len(spy.hidden) == 6 and all(h is None for h in spy.hidden)
    assert all(f is None for f in spy.features)
    assert spy.topk and all(len(row) == TOP_K for rows in spy.topk for row in rows)


def test_a_drafter_that_needs_the_hidden_state_gets_it(tiny_lm) -> None:
    class Wants(_Spy):
        needs = DrafterNeeds(hidden=True)

    spy = _run(tiny_lm, Wants)
    H = tiny_lm.model.config.hidden_size
    assert all(isinstance(h, torch.Tensor) and h.shape == (H,) for h in spy.hidden)
    with torch.no_grad():                             # step 0: the prefill's last row
        last = tiny_lm.model.model(input_ids=torch.tensor([PROMPT[:-1]])).last_hidden_state[0, -1]
    torch.testing.assert_close(spy.hidden[0], last, atol=1e-4, rtol=1e-4)
    assert all(f is None for f in spy.features)       # hidden asked, feature rows not


def test_target_topk_widens_the_recorded_top_k(tiny_lm) -> None:
    class Wide(_Spy):
        needs = DrafterNeeds(target_topk=TOP_K + 5)

    spy = _run(tiny_lm, Wide)
    assert spy.topk and all(len(row) == TOP_K + 5 for rows in spy.topk for row in rows)
    assert all(h is None for h in spy.hidden)


def test_feature_layers_give_feature_rows_and_no_hidden_state(tiny_lm) -> None:
    class Rows(_Spy):
        needs = DrafterNeeds(feature_layers=(FINAL,))

    spy = _run(tiny_lm, Rows)
    H = tiny_lm.model.config.hidden_size
    assert spy.features[0].shape == (len(PROMPT) - 1, H)          # the prefill's rows
    assert all(f.shape == (1, H) for f in spy.features[1:])       # nothing accepted: the root's row
    assert all(h is None for h in spy.hidden)


def test_an_old_style_plugin_still_gets_what_its_loose_attributes_asked_for(tiny_lm) -> None:
    """A plugin written before DrafterNeeds: no `needs`, the old optional attributes."""
    class Old:
        wants_hidden = True
        target_topk = TOP_K + 2

        def __init__(self, config: Any, setup: Any) -> None:
            self.hidden: list[Any] = []
            self.topk: list[Any] = []

        def propose(self, ctx: Any) -> DraftTree:
            self.hidden.append(ctx.hidden)
            return DraftTree.empty()

        def observe(self, step: Any) -> None:
            self.topk.append(step.target_topk)

    assert needs_of(Old(None, None)) == DrafterNeeds(hidden=True, target_topk=TOP_K + 2)
    old = _run(tiny_lm, Old)
    assert all(isinstance(h, torch.Tensor) for h in old.hidden)
    assert all(len(row) == TOP_K + 2 for rows in old.topk for row in rows)


def test_a_plugin_that_declares_nothing_runs_with_no_needs(tiny_lm) -> None:
    class Bare:
        def __init__(self, config: Any, setup: Any) -> None:
            self.hidden: list[Any] = []

        def propose(self, ctx: Any) -> DraftTree:
            self.hidden.append(ctx.hidden)
            return DraftTree.chain([int(ctx.tokens[-1])], "bare")

        def observe(self, step: Any) -> None:
            pass

    assert needs_of(Bare(None, None)) == NO_NEEDS
    bare = _run(tiny_lm, Bare)
    assert all(h is None for h in bare.hidden)


def test_needs_are_checked() -> None:
    class Wrong:
        needs = {"hidden": True}
    with pytest.raises(TypeError, match="DrafterNeeds"):
        needs_of(Wrong())
    with pytest.raises(TypeError, match="target_topk"):
        DrafterNeeds(target_topk=-1)
    with pytest.raises(TypeError, match="hidden"):
        DrafterNeeds(hidden=1)  # type: ignore[arg-type]
    assert not NO_NEEDS.capture and DrafterNeeds(feature_layers=(0,)).capture


def test_every_built_in_drafter_declares_its_needs(tiny_lm) -> None:
    """Each built-in drafter class says what it needs (a DrafterNeeds on the class or set in
    __init__): read from the source, so drafters needing a checkpoint are covered too."""
    import inspect

    built_in = [s for s in ordered() if getattr(s.factory, "__module__", "").startswith("specviz.")]
    assert len(built_in) >= 17
    for spec in built_in:
        cls = spec.factory
        assert isinstance(cls, type), spec.name
        declared = isinstance(getattr(cls, "needs", None), DrafterNeeds) or any(
            "self.needs = DrafterNeeds(" in inspect.getsource(c) for c in cls.__mro__ if c.__module__.startswith("specviz."))
        assert declared, f"{spec.name}: {cls.__name__} declares no `needs`"
    assert all(needs_of(REGISTRY[name].factory).hidden for name in ("medusa", "hydra"))


# ---- StepRecord: keywords only, the trace format unchanged --------------------------------

def test_step_record_is_built_with_keywords_only() -> None:
    with pytest.raises(TypeError):
        StepRecord(0, 3, DraftTree.empty(), (), 6, (6,), (6,), (), {}, 0.01)  # type: ignore[misc]


def test_the_shipped_trace_round_trips_unchanged() -> None:
    raw = json.loads(LANDING.read_text(encoding="utf-8"))
    trace = Trace.from_dict(raw)
    assert json.loads(trace.to_json()) == raw
    step = raw["steps"][3]
    assert json.loads(json.dumps(StepRecord.from_dict(step).to_dict())) == step


# ---- narration comes from the spec ---------------------------------------------------------

def test_the_narrative_tells_what_the_spec_narrates(monkeypatch) -> None:
    seen: list[Scene] = []

    def narrate(scene: Scene) -> StepStory:
        seen.append(scene)
        return StepStory(source=(("The spec says ", Quote((3, 4)), " came from ", Place(1, 3), "."),),
                         size=(("Sized by the spec.",),), passes=(("Its own passes: none.",),))

    monkeypatch.setitem(REGISTRY, "ngram_trie", dataclasses.replace(REGISTRY["ngram_trie"], narrate=narrate))
    text = step_narrative(hand_trace("ngram_trie"), 0)
    assert "**Where the draft came from.** The spec says “ C D” came from in your context, at characters 0–3: “…**B C** D…”." in text
    assert "**Why the tree has this size.** Sized by the spec." in text
    assert "saved **1 pass** (1 saved up to here, over 1 step). Its own passes: none." in text
    assert "matched earlier text" not in text                     # the drafter's own narrator is replaced
    assert seen[0].drafter == "ngram_trie" and seen[0].committed == (1, 2, 3, 4, 3, 9)
    assert seen[0].step.info["match_len"] == 1


def test_the_same_notes_are_told_only_by_the_drafter_that_declares_them() -> None:
    """The explainer does not guess the drafter from its notes: the same `match_len` told by a
    lookup drafter's narrator, not by one that declares none, nor for an unknown drafter."""
    told = step_narrative(hand_trace("ngram_trie"), 0)
    assert "**Where the draft came from.** The last token of the text, “ D”, matched earlier text." in told
    for name in ("vanilla", "not_installed_here"):
        plain = step_narrative(hand_trace(name), 0)
        assert "matched earlier text" not in plain
        assert "**Where the draft came from.** Draft nodes by source: context 2." in plain
        assert "accepted **1**" in plain and "The bonus token “!”" in plain


def test_every_registered_narrator_tells_the_shipped_trace() -> None:
    trace = Trace.from_json(LANDING.read_text(encoding="utf-8"))
    committed = (*trace.prompt_ids, *trace.output_ids)
    for spec in ordered():
        for s in trace.steps[:8]:
            story = spec.narrate(Scene(s, committed, spec.name, trace.drafter_config))
            assert isinstance(story, StepStory), spec.name
    sources = [REGISTRY[trace.drafter].narrate(Scene(s, committed, trace.drafter, trace.drafter_config)).source
               for s in trace.steps]
    assert any(sources)                                           # the landing drafter tells its lookup


# ---- viz/ and analysis/ name no drafter ---------------------------------------------------

def test_viz_and_analysis_name_no_drafter() -> None:
    """The explainers and analyses ask the registry (baseline(), the preselected flags, each
    spec's narrator): no string literal in specviz/viz/ or specviz/analysis/ is a drafter's name."""
    names = set(REGISTRY)
    files = [p for d in ("viz", "analysis") for p in sorted((ROOT / "specviz" / d).rglob("*.py"))]
    assert len(files) > 10
    offenders = [hit for path in files for hit in drafter_literals(path, names, skip_colour_tables=True)]
    assert not offenders, offenders


def test_a_named_drafter_would_be_found(tmp_path: Path) -> None:
    probe = tmp_path / "probe_contracts.py"
    probe.write_text('X = "vanilla"\nY = ("a", "prompt_lookup")\nZ = "speedup vs vanilla"\n'
                     'C = {"vanilla": "#fff"}\nD = {"vanilla": 1}\n', encoding="utf-8")
    hits = drafter_literals(probe, {"vanilla", "prompt_lookup"}, skip_colour_tables=True)
    assert [h.split(" ")[0].rsplit(":", 1)[1] for h in hits] == ["1", "2", "5"]


def test_doctor_checks_the_drafters_the_registry_preselects(monkeypatch) -> None:
    from specviz.analysis.doctor import default_drafters

    assert default_drafters() == tuple(s.name for s in ordered() if s.preselected and not s.is_baseline)
    assert default_drafters()
    name = next(s.name for s in ordered() if not s.preselected and not s.is_baseline)
    monkeypatch.setitem(REGISTRY, name, dataclasses.replace(REGISTRY[name], preselected=True))
    assert name in default_drafters()


def test_compare_takes_its_reference_from_the_registry(monkeypatch) -> None:
    from specviz.viz.compare import CompareRow, compare_figure

    base = REGISTRY[next(s.name for s in ordered() if s.is_baseline)]
    rows = [CompareRow(n, 10.0, 1.0, 1.0, 1, 1, "yes", "") for n in (base.name, "other")]
    assert compare_figure(rows).data[0].marker.color == ("#868e96", "#1c7ed6")
    assert f"speedup vs {base.name}" in CompareRow.columns()
    # another baseline: the figure greys that one
    monkeypatch.setitem(REGISTRY, base.name, dataclasses.replace(base, is_baseline=False))
    monkeypatch.setitem(REGISTRY, "other", dataclasses.replace(base, name="other", is_baseline=True, order=-1))
    assert compare_figure(rows).data[0].marker.color == ("#1c7ed6", "#868e96")


def test_the_bench_peers_declare_their_needs_and_narrator() -> None:
    """The peers' modules import optional packages, so their declarations are read from source."""
    for path in sorted((ROOT / "specviz" / "peers").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        specs = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "DrafterSpec"]
        if not specs:
            continue
        assert all(any(k.arg == "narrate" for k in call.keywords) for call in specs), path.name
        factory = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name.endswith("Drafter")}
        assert factory, path.name
        for cls in factory.values():       # `needs = ...` in the class, or derived from TokensOnly
            assert any(getattr(b, "id", "") == "TokensOnly" for b in cls.bases) or any(
                isinstance(s, ast.Assign) and any(getattr(t, "id", "") == "needs" for t in s.targets)
                for s in cls.body), f"{path.name}: {cls.name} declares no `needs`"


def test_notes_a_narrator_cannot_read_leave_the_shorter_account() -> None:
    """A trace file is untrusted: a hierarchy step whose db_hits is not a mapping still tells."""
    text = step_narrative(hand_trace("hierarchy", {"db_hits": 5, "candidates": "x"}), 0)
    assert "**Where the draft came from.** Draft nodes by source: context 2." in text
    assert "The bonus token “!”" in text
