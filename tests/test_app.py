"""The Gradio explorer (app.py, specviz/ui): builds without a model, its handlers stream,
stop, step, compare, load traces and report bad input as gr.Error; served over HTTP, its
API returns a Trace that round-trips."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gradio as gr
import pytest
from serving import launched

import app
from specviz.models import loading as models
from specviz.drafters.kit.base import REGISTRY, DrafterSpec
from specviz.core.settings import describe
from specviz.core.trace import Trace
from specviz.ui import compare_tab, replay_tab, run_panel
from specviz.ui.session import Session
from specviz.ui.setup_panel import SetupPanel, build_setup_panel
from specviz.ui.uploads import read_context_files

CONTEXT = "a b c d e f a b c d e f a b c d e f"


def test_build_demo_loads_no_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(models, "_CACHE", {})

    def no_loading(*args, **kwargs):
        raise AssertionError("build_demo() must not load a model")

    monkeypatch.setattr(models, "_load", no_loading)
    demo = app.build_demo()
    assert isinstance(demo, gr.Blocks)
    assert models._CACHE == {}
    assert isinstance(app.demo, gr.Blocks)         # the module-level demo that Spaces launch


def values(panel: SetupPanel, model: str = "tiny-random", drafter: str = "ngram_trie",
           context: str = CONTEXT, message: str = "Repeat.", **overrides: Any) -> dict[str, Any]:
    """The inputs' values by name as the page would send them: defaults, with some overridden."""
    return panel.form(model=model, drafter=drafter, context=context, message=message, **overrides)


def test_every_drafter_gets_its_settings_from_its_config(panel: SetupPanel) -> None:
    for name, spec in REGISTRY.items():
        ui = [i.name for i in describe(spec.config_cls) if i.ui]
        assert [s for g, s in panel.drafter_form.keys if g == name] == ui
    assert [s for _, s in panel.decoding_form.keys] == ["max_new_tokens", "temperature", "top_p", "top_k", "seed"]


def test_a_newly_registered_drafter_is_rendered_without_ui_code(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import dataclass

    from specviz.core.settings import Settings, setting

    @dataclass(frozen=True)
    class ToyConfig(Settings):
        width: int = setting(3, "How wide.", low=1, high=9)
        greedy_only: bool = setting(False, "A switch.")

    monkeypatch.setitem(REGISTRY, "toy", DrafterSpec("toy", ToyConfig, lambda c, s: None, "A toy.", "-"))
    with gr.Blocks():
        p = build_setup_panel()
    assert [s for g, s in p.drafter_form.keys if g == "toy"] == ["width", "greedy_only"]
    width = p.drafter_form.components[p.drafter_form.keys.index(("toy", "width"))]
    assert isinstance(width, gr.Slider) and (width.minimum, width.maximum, width.value) == (1, 9, 3)
    assert "toy" in p.drafter.choices[-1]


def _run(panel: SetupPanel, session: Session, **kw: Any) -> list[tuple]:
    return list(run_panel.make_stream_handler(panel)(session, **values(panel, **kw)))


def test_generate_streams_every_step_and_keeps_the_trace(panel: SetupPanel, monkeypatch) -> None:
    monkeypatch.setattr(run_panel, "STREAM_EVERY_S", -1.0)       # a page update after every step
    session = Session()
    updates = _run(panel, session, max_new_tokens=12)
    trace = session.trace
    assert trace is not None and trace.model_id == "tiny-random" and trace.totals.new_tokens == 12
    assert len(updates) == 1 + len(trace.steps) + 1              # loading, one per step, final
    counts = [u[1].count("title=") for u in updates[1:-1]]
    assert counts == sorted(counts) and updates[-1][0].count('title="step') == 12
    assert "done (length)" in updates[-1][1] and "**12** tokens" in updates[-1][1]


def test_stop_keeps_what_was_generated(panel: SetupPanel, monkeypatch) -> None:
    monkeypatch.setattr(run_panel, "STREAM_EVERY_S", -1.0)
    session = Session()
    handler = run_panel.make_stream_handler(panel)(session, **values(panel, drafter="vanilla", max_new_tokens=40))
    next(handler)                                   # loading
    for _ in range(3):
        next(handler)                               # three steps
    run_panel.request_stop(session)
    rest = list(handler)
    trace = session.trace
    assert trace.stop_reason == "stopped" and 3 <= len(trace.steps) < 40
    assert len(trace.output_ids) == len(trace.steps)             # vanilla: one token per step
    assert "stopped" in rest[-1][1] and rest[-1][0].count('title="step') == len(trace.output_ids)
    assert Trace.from_json(trace.to_json()) == trace


def test_speedup_appears_once_a_vanilla_reference_exists(panel: SetupPanel) -> None:
    session = Session()
    first = _run(panel, session, drafter="ngram_trie", max_new_tokens=6)
    assert "speedup" not in first[-1][1]
    _run(panel, session, drafter="vanilla", max_new_tokens=6)
    again = _run(panel, session, drafter="ngram_trie", max_new_tokens=6)
    assert "speedup vs vanilla" in again[-1][1]


def test_teaching_mode_runs_one_step_per_click(panel: SetupPanel) -> None:
    session = Session()
    teach = run_panel.make_teach_handler(panel)
    args = values(panel, drafter="prompt_lookup", max_new_tokens=5)
    for n in (1, 2, 3):
        html, counters, session = teach(session, **args)
        assert len(session.trace.steps) == n and f"step {n - 1} done" in counters
    first_ids = session.trace.output_ids
    html, counters, session = teach(session, **values(panel, drafter="vanilla", max_new_tokens=5))
    assert len(session.trace.steps) == 1                         # a changed input starts again
    assert session.trace.output_ids == first_ids[:1]
    _, note, session = run_panel.teach_reset(session)
    assert session.live is None and session.trace is None and "reset" in note


@pytest.mark.parametrize("kw, words", [
    ({"message": "", "context": ""}, "message is empty"),
    ({"temperature": -1.0}, "temperature"),
    ({"num_draft": 0}, "num_draft"),
    ({"model": "/no/such/model-dir"}, "SPECVIZ_ALLOWED_DIRS"),   # missing and outside alike
])
def test_bad_input_is_shown_to_the_user(panel: SetupPanel, kw: dict, words: str) -> None:
    with pytest.raises(gr.Error) as info:
        _run(panel, Session(), **kw)
    assert words in info.value.message


def test_compare_runs_vanilla_and_the_chosen_drafters(panel: SetupPanel) -> None:
    session = Session()
    handler = compare_tab.make_compare_handler(panel)
    out = list(handler(session, ["prompt_lookup", "oracle"], 1, **values(panel, max_new_tokens=10)))
    note, table, fig, pick, session = out[-1]
    rows = table["data"]
    assert [row[0] for row in rows] == ["vanilla", "prompt_lookup", "oracle"]
    assert [row[6] for row in rows] == ["yes", "yes", "yes"]        # greedy: identical to vanilla
    assert "first differing token" not in table["headers"] and "alpha" not in table["headers"]   # none filled
    assert rows[0][2] == 1.0 and "1 round" in note and "One round: each tokens/s is a single run" in note
    assert set(session.compared) == {"vanilla", "prompt_lookup", "oracle"}
    assert compare_tab.pick_compared(session, "oracle").trace.drafter == "oracle"


def test_trace_upload_replays_or_explains(tmp_path: Path, panel: SetupPanel) -> None:
    session = Session()
    _run(panel, session, max_new_tokens=6)
    path = Path(replay_tab.write_trace(session.trace))
    fresh = replay_tab.load_uploaded(Session(), str(path))
    assert fresh.trace == session.trace
    bad = {"not json": "{oops", "other schema": json.dumps({**json.loads(path.read_text()), "schema_version": 99}),
           "missing field": json.dumps({"schema_version": 1})}
    expected = {"not json": "not valid JSON", "other schema": "schema_version 99", "missing field": "malformed"}
    for name, text in bad.items():
        f = tmp_path / f"{name}.json"
        f.write_text(text)
        with pytest.raises(gr.Error) as info:
            replay_tab.load_uploaded(Session(), str(f))
        assert expected[name] in info.value.message


def test_context_uploads_are_checked(tmp_path: Path, monkeypatch) -> None:
    from specviz.ui import uploads

    good = tmp_path / "a.md"
    good.write_text("# notes\nsome text")
    assert read_context_files([good]) == "# notes\nsome text"
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00bad")
    exe = tmp_path / "c.exe"
    exe.write_text("x")
    monkeypatch.setattr(uploads, "CONTEXT_LIMIT_BYTES", 10)
    big = tmp_path / "d.txt"
    big.write_text("x" * 11)
    for path, words in ((binary, "not UTF-8"), (exe, "only .txt, .md"), (big, "the limit is")):
        with pytest.raises(uploads.UploadError, match=words):
            read_context_files([path])


def test_api_returns_a_trace_that_round_trips_over_http() -> None:
    from gradio_client import Client

    with launched(app.build_demo()) as url:
        client = Client(url, verbose=False)
        text = client.predict("tiny-random", "prompt_lookup", "Repeat.", CONTEXT, '{"max_ngram": 3}', 8, 0.0, 0,
                              api_name="/trace")
        trace = Trace.from_json(text)
        assert trace.drafter == "prompt_lookup" and trace.drafter_config["max_ngram"] == 3
        assert trace.totals.new_tokens == 8 and trace.context_char_span is not None
        assert Trace.from_json(trace.to_json()) == trace and trace.to_json() == text
        with pytest.raises(Exception, match="num_draft"):
            client.predict("tiny-random", "ngram_trie", "hi", "", '{"num_draft": 0}', 8, 0.0, 0, api_name="/trace")


@pytest.mark.slow
def test_embedded_model_drafts_a_summary_from_its_context(panel: SetupPanel) -> None:
    """The newcomer's tour: the bakery preset with ngram_trie copies from the context, and the
    inspector can show where from."""
    from specviz import viz
    from specviz.ui.inspector import most_accepted_step
    from specviz.ui.presets import load_presets
    from specviz.viz.spans import context_sources

    preset = load_presets()[0]
    session = Session()
    _run(panel, session, model="embedded", drafter="ngram_trie", context=preset.context,
         message=preset.message, max_new_tokens=64, size_by_cost=False)   # the paper's trees
    trace = session.trace
    spans = viz.output_spans(trace.steps, trace.output_pieces)
    assert any(sp.kind == "draft" and sp.source == "context" for sp in spans)
    k = most_accepted_step(trace)
    assert len(trace.steps[k].accepted) >= 2
    assert context_sources(trace, k)["accepted"]


def test_the_landing_trace_ships_and_opens_without_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page opens on a recorded summarization with bushy trees: read from the package
    data, drawn without loading a model, once per process (every visitor gets the same values);
    a new session shows it; the set-up panel opens on its settings and its input."""
    from specviz import viz
    from specviz.files.resources import data_path
    from specviz.ui import landing
    from specviz.ui.inspector import build_inspector, most_accepted_step
    from specviz.ui.views import Page, RunViews

    path = data_path("traces", "landing.json")
    assert path.is_file() and path.stat().st_size < 300_000
    monkeypatch.setattr(models, "_load", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loads a model")))
    trace = landing.landing_trace()
    assert trace is not None and trace.model_id == "embedded" and trace.drafter == "ngram_trie"
    assert trace.context_char_span is not None and "bakery" in trace.prompt_text
    assert max(len(s.tree) for s in trace.steps) >= 10                # bushy trees
    assert any(len(s.tree.children.get(-1, [])) > 1 for s in trace.steps)
    assert all(len(s.target_top_prob) == len(s.tree) + 1 for s in trace.steps)
    k = landing.landing_step(trace)                                 # opens on a bushy step
    assert len(trace.steps[k].tree.leaves()) > 2 and len(trace.steps[k].accepted) >= 2
    assert len(trace.steps[k].accepted) <= len(trace.steps[most_accepted_step(trace)].accepted)
    views = RunViews()
    with gr.Blocks():
        build_inspector(Page(gr.State(), None, views, lambda event, where: event))
    monkeypatch.setattr(landing, "_DRAWN", {})
    drawn = landing.landing_views(views)
    bundle = drawn["inspector.views"]
    assert drawn["inspector.slider"]["value"] == k and bundle["n"] == len(trace.steps)
    assert bundle["steps"][k]["tree"] == viz.figure_json(viz.tree_figure(trace, k))   # step k's tree and mask
    assert bundle["steps"][k]["mask"] == viz.figure_json(viz.mask_figure(trace, k))
    assert bundle["steps"][k]["narrative"].startswith(f"### What happened at step {k}")
    again = landing.landing_views(views)
    assert again["inspector.views"] is bundle                              # drawn once per process
    assert again["inspector.slider"] is not drawn["inspector.slider"]       # an update is used up when sent: a copy each
    assert "recorded run" in landing.landing_note(trace)
    assert landing.new_landing_session().trace is trace
    assert viz.output_html(viz.output_spans(trace.steps, trace.output_pieces)).count("sv-token") == trace.totals.new_tokens
    # the panel opens on the run's own settings (the paper's trees: sizing by cost off) and input
    opening = landing.opening()
    assert (opening.model, opening.drafter, opening.settings["size_by_cost"]) == ("embedded", "ngram_trie", False)
    assert opening.decoding["max_new_tokens"] == trace.decoding["max_new_tokens"] and "size_by_cost" in opening.note
    context, message = landing.opening_text()
    assert context and context in trace.prompt_text and message and message in trace.prompt_text
    with gr.Blocks():
        panel = build_setup_panel(opening)
    size = panel.drafter_form.named["ngram_trie__size_by_cost"]
    assert panel.drafter.value == "ngram_trie" and size.value is False


def test_tracked_handlers_take_a_progress_and_keep_their_own_signature() -> None:
    import inspect

    from specviz.ui.progress import tracked

    def plain(session, chosen, *values):
        return (session, chosen, values)

    def streamed(session, *values):
        yield session
        yield values

    h = tracked(plain, 2)
    params = list(inspect.signature(h).parameters.values())
    assert [p.name for p in params[:3]] == ["arg0", "arg1", "progress"]
    assert isinstance(params[2].default, gr.Progress) and params[2].default.track_tqdm
    assert h("s", ["a"], params[2].default, 1, 2) == ("s", ["a"], (1, 2))    # Progress dropped
    g = tracked(streamed, 1)
    assert inspect.isgeneratorfunction(g)
    assert list(g("s", None, 1, 2)) == ["s", (1, 2)]


def test_moving_between_steps_is_wired_to_the_browser_only() -> None:
    """The slider, Previous / Next, the jumps and Play have no Python function: their `js=`
    redraws from the step views sent with the run (the browser test checks the page)."""
    from specviz.ui import build_demo
    from specviz.ui.inspector import JUMPS, NEXT_ID, PLAY_ID, PREV_ID, SLIDER_ID

    demo = build_demo()
    ids = {c["props"].get("elem_id"): c["id"] for c in demo.config["components"] if c["props"].get("elem_id")}
    wanted = {(ids[SLIDER_ID], "input"), (ids[PREV_ID], "click"), (ids[NEXT_ID], "click"), (ids[PLAY_ID], "click"),
              *((ids[elem], "click") for _, elem, _ in JUMPS.values())}
    found = set()
    for dep in demo.config["dependencies"]:
        for target in dep["targets"]:
            if tuple(target) in wanted:
                assert not dep["backend_fn"] and "window.specviz" in (dep["js"] or ""), (target, dep["js"])
                assert ids["step-views"] in dep["inputs"] or target[1] == "change"
                found.add(tuple(target))
    assert found == wanted


def test_the_landing_note_says_where_and_how_the_run_was_recorded() -> None:
    from specviz.ui import landing

    recording = {"recorded": "2026-01-01 10:00 UTC", "command": "python scripts/record_landing.py",
                 "machine": {"cpu": "Some CPU", "cores": 2, "torch_threads": 2, "device": "cpu"},
                 "cost_model": {"past_len": 400, "rows": [1, 20], "seconds": [0.08, 0.2]}, "note": "a busy machine"}
    note = landing.recording_note(recording)
    for part in ("2026-01-01 10:00 UTC", "Some CPU", "2 cores", "scripts/record_landing.py", "80 ms", "200 ms",
                 "a busy machine"):
        assert part in note
    assert landing.recording_note(None) == ""


def test_run_views_are_drawn_and_cleared_by_name() -> None:
    """One registry of the run's views: each drawn by its own function, emptied together (a note
    where a view shows notes), a view kept where asked; names are unique."""
    from specviz.ui.views import RunViews
    from specviz.viz import timing_stack_figure as stack

    views = RunViews()
    with gr.Blocks():
        about, plot, strip = gr.Markdown(), gr.Plot(), gr.HTML()
    views.add("about", about, draw=lambda trace, k: f"{len(trace.steps)} steps at {k}", empty="none", note=True)
    views.add("plot", plot, draw=lambda trace, k: stack(trace), empty=None)
    views.add("strip", strip, empty="")                                  # drawn in the browser
    with pytest.raises(ValueError, match="registered already"):
        views.add("about", about)
    from conftest import hand_trace

    trace = hand_trace("ngram_trie")
    drawn = views.drawn(trace, 0)
    assert drawn[about] == "1 steps at 0" and strip not in drawn
    assert drawn[plot].type == "plotly"                                  # made once, sent as it is
    assert views.cleared("building...") == {about: "building...", plot: None, strip: ""}
    assert views.cleared("x", keep=(strip,)) == {about: "x", plot: None}
    assert views.drawn(None, 0, "gone") == views.cleared("gone")


def test_the_form_builds_the_services_request_by_name(panel: SetupPanel) -> None:
    """The run's inputs go to a handler by name (gradio's inputs_kwargs) and come back as the run
    service's RunRequest; a setting is looked up by its drafter's group, never by position."""
    from specviz.engine.service import RunRequest

    assert set(panel.inputs) >= {"model", "drafter", "context", "message", "dtype", "decoding__max_new_tokens",
                                 "ngram_trie__num_draft", "prompt_lookup__max_ngram"}
    request = panel.request(panel.form(model=" tiny-random ", drafter="prompt_lookup", max_ngram=2,
                                       max_new_tokens=7, message="hi"))
    assert isinstance(request, RunRequest) and request.model_id == "tiny-random"
    assert dict(request.settings)["max_ngram"] == 2 and request.decoding.max_new_tokens == 7
    assert "num_draft" not in dict(request.settings)                     # another drafter's group
    assert request.settings_source == "settings" and request.device_map is None
    with pytest.raises(KeyError, match="no input named"):
        panel.form(drafter="vanilla", max_ngram=2)


def test_a_second_timing_of_a_model_is_said() -> None:
    from types import SimpleNamespace

    from specviz.engine.service import RunRequest
    from specviz.ui import runner

    def run(seconds: tuple[float, ...]) -> Any:
        cost = SimpleNamespace(seconds=seconds)
        return SimpleNamespace(request=RunRequest("m"), lm=SimpleNamespace(cost_model=lambda: cost))

    seen: dict[str, tuple[float, ...]] = {}
    assert runner.retimed_note(seen, run((0.1, 0.2))) == ""              # the session's first run of it
    assert runner.retimed_note(seen, run((0.1, 0.2))) == ""              # the same curve: the same load
    assert "timed again" in runner.retimed_note(seen, run((0.1, 0.3)))


def test_verify_the_whole_proposal_reruns_the_input_with_the_sizing_off(panel: SetupPanel, tiny_lm_tok, tmp_path,
                                                                       monkeypatch) -> None:
    """The inspector's button: the shown run's input again with its drafter's whole_proposal
    settings (size_by_cost = false), opened at the step that drafted from the same place, whose
    tree is that step's whole proposal; refused in one line without a cut step, once the boxes
    hold another input, and for a run whose sizing was off already."""
    from test_eagle import save_random

    from specviz.ui import inspector
    from specviz.ui.whole_proposal import cut_steps, whole_request

    folder = save_random(tiny_lm_tok, "eagle", tmp_path / "head")
    monkeypatch.setenv("SPECVIZ_ALLOWED_DIRS", str(tmp_path))
    session = Session()
    settings = dict(drafter="eagle", checkpoint=folder, max_new_tokens=8, top_k=3, depth=2, total_tokens=8)
    form = values(panel, **settings)
    _run(panel, session, **settings)
    before = session.trace
    assert cut_steps(before), "nothing was cut: the test proves little"
    k = cut_steps(before)[0]
    whole = inspector.make_whole_handler(panel)
    session, note = whole(session, k, **form)
    after = session.trace
    assert after.drafter_config["size_by_cost"] is False and after.output_ids == before.output_ids
    j = session.open_at
    assert after.steps[j].committed_len == before.steps[k].committed_len and "drafted from the same place" in note
    proposal = before.steps[k].proposal
    if k == 0:                                 # the same features: the very tree
        assert after.steps[j].tree.tokens == proposal.tree.tokens
    assert len(after.steps[j].tree) == len(proposal.tree) and not cut_steps(after)
    with pytest.raises(gr.Error, match="had size_by_cost = false already"):
        whole(session, j, **form)
    session.trace = before
    with pytest.raises(gr.Error, match="no longer hold this run's input"):
        whole(session, k, **{**form, "message": "Something else."})
    with pytest.raises(Exception, match="no run on the page"):
        whole_request(None, panel.request(form))
