"""specviz.viz: figures and highlighted text drawn from real traces of the tiny random model.

The mask test spies on the model's forward to capture the attention masks the engine really
gave it, and checks the heatmap's matrix against them, step by step.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
import pytest
import torch

from specviz import build_prompt, generate
from specviz.core.decoding import DecodingConfig
from specviz.models import LoadedModel
from specviz.core.trace import StepRecord, Totals, Trace
from specviz.core.tree import DraftTree
from specviz import viz
from specviz.viz.palette import SOURCE_COLOURS, source_colour
from specviz.viz.spans import context_sources

from conftest import hand_trace

# repeated n-grams with different continuations: the trie branches
CONTEXT = ("the red fox jumps over the lazy dog. the red fox runs past the old barn. "
           "the red hen sits on the lazy dog. the old barn is red. ") * 2


class SpyModel:
    """Delegates to the real model; records every attention mask it is given."""

    def __init__(self, model: Any) -> None:
        self._model, self.masks = model, []

    def __call__(self, **kwargs: Any) -> Any:
        if kwargs.get("attention_mask") is not None:
            self.masks.append(kwargs["attention_mask"].detach().clone())
        return self._model(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


@pytest.fixture(scope="module")
def spied(tiny_lm_tok: LoadedModel) -> tuple[Trace, list[torch.Tensor]]:
    spy = SpyModel(tiny_lm_tok.model)
    lm = dataclasses.replace(tiny_lm_tok, model=spy)
    # no chat template: the prompt ends with a phrase of the context, so the trie drafts from it
    prompt = build_prompt(lm.tokenizer, "Once more: the red fox", context=CONTEXT, chat=False)
    trace = generate(lm, prompt, "ngram_trie", {"size_by_cost": False, "num_draft": 12},
                     DecodingConfig(max_new_tokens=24))
    return trace, spy.masks


@pytest.fixture(scope="module")
def oracle_trace(tiny_lm_tok: LoadedModel) -> Trace:
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Say something.")
    decoding = DecodingConfig(max_new_tokens=20)
    vanilla = generate(tiny_lm_tok, prompt, "vanilla", None, decoding)
    return generate(tiny_lm_tok, prompt, "oracle", {"tokens": vanilla.output_ids, "max_tokens": 6}, decoding)


def test_heatmap_is_the_mask_the_verifier_used(spied) -> None:
    trace, masks = spied
    assert len(masks) == len(trace.steps) and any(len(s.tree) > 1 for s in trace.steps)
    for k, used in enumerate(masks):
        visible = (used[0, 0] == 0).numpy()                    # additive mask: 0 = attend
        np.testing.assert_array_equal(viz.verifier_mask(trace, k), visible)
        view, labels = viz.mask_view(trace, k)
        past_len = trace.steps[k].committed_len - 1
        assert view.shape == (visible.shape[0], 1 + visible.shape[0]) and len(labels) == visible.shape[0]
        np.testing.assert_array_equal(view[:, 0], visible[:, :past_len].all(axis=1))   # the prefix band
        np.testing.assert_array_equal(view[:, 1:], visible[:, past_len:])
        fig = viz.mask_figure(trace, k)
        np.testing.assert_array_equal(np.asarray(fig.data[0].z), view.astype(int))


def test_mask_shows_ancestors_only(spied) -> None:
    trace, _ = spied
    k = max(range(len(trace.steps)), key=lambda i: len(trace.steps[i].tree.leaves()))
    tree = trace.steps[k].tree
    assert len(tree.leaves()) > 1                              # a real branching tree
    view, _ = viz.mask_view(trace, k)
    n = len(tree) + 1
    np.testing.assert_array_equal(view[:n, 1:n + 1], tree.ancestor_matrix())
    assert view[:, 0].all()                                    # every row sees the whole prefix


def test_tree_figure_has_one_node_per_draft_node(spied, oracle_trace) -> None:
    for trace in (spied[0], oracle_trace):
        for k, step in enumerate(trace.steps):
            fig = viz.tree_figure(trace, k)
            nodes = next(t for t in fig.data if t.name == "draft nodes")
            assert len(nodes.x) == len(step.tree) == len(nodes.text)
            assert list(nodes.customdata) == list(range(len(step.tree)))
            status = viz.node_status(step)
            assert [status[i] for i in step.accepted] == ["accepted"] * len(step.accepted)
            assert status.count("accepted") == len(step.accepted)
            bonus = [t for t in fig.data if t.name == "bonus"]
            assert len(bonus) == (1 if len(step.new_tokens) > len(step.accepted) else 0)


def test_tree_layout_puts_children_below_their_parent(spied) -> None:
    trace, _ = spied
    for step in trace.steps:
        xs, ys = viz.tree_layout(step)
        for i, p in enumerate(step.tree.parents):
            assert ys[i] == -step.tree.depths[i]
            if p >= 0:
                kids = step.tree.children[p]
                assert xs[p] == pytest.approx(sum(xs[c] for c in kids) / len(kids))


def test_timing_bars_sum_to_the_step_times(spied) -> None:
    trace, _ = spied
    by_step = viz.timing_by_step(trace)
    fig = viz.timing_stack_figure(trace)
    for k, step in enumerate(trace.steps):
        total = sum(v[k] for v in by_step.values())
        assert total == pytest.approx(max(step.wall, sum(step.timings.values())), rel=1e-9)
        drawn = sum(bar.y[k] for bar in fig.data) / 1e3
        assert drawn == pytest.approx(total, rel=1e-9)
        one = viz.step_timing_figure(trace, k).data[0]
        assert sum(one.x) / 1e3 == pytest.approx(total, rel=1e-9)
    assert set(by_step) >= {"verify.forward", "draft.search", "other"}


def test_output_spans_cover_the_output_and_say_how_each_token_came(oracle_trace, spied) -> None:
    for trace in (oracle_trace, spied[0]):
        spans = viz.output_spans(trace.steps, trace.output_pieces)
        assert [s.token for s in spans] == list(trace.output_ids)
        assert "".join(s.text for s in spans) == trace.output_text       # the text, exactly
        for s in trace.steps:
            mine = [sp for sp in spans if sp.step == s.index]
            kinds = [sp.kind for sp in mine]
            assert kinds[:len(s.accepted)] == ["draft"] * len(s.accepted)
            assert kinds[len(s.accepted):] == ([("bonus" if len(s.tree) else "plain")]
                                               * (len(s.new_tokens) - len(s.accepted)))
    spans = viz.output_spans(oracle_trace.steps, oracle_trace.output_pieces)
    assert sum(sp.kind == "draft" for sp in spans) > len(spans) // 2    # the oracle is always right
    html = viz.output_html(spans, highlight_step=1)
    assert html.count("title=\"step ") == len(spans) and "outline" in html
    assert source_colour("oracle") in html


def test_output_html_escapes_token_text() -> None:
    tree = DraftTree.chain([5], "context")
    step = StepRecord(index=0, committed_len=3, tree=tree, accepted=(0,), bonus=6, new_tokens=(5, 6),
                      target_top=(5, 6), target_prob=(0.9,), timings={}, wall=0.01)
    spans = viz.output_spans([step], ["<b>", "&x"])
    html = viz.output_html(spans)
    assert "&lt;b&gt;" in html and "&amp;x" in html and "<b>" not in html.split("</div>", 1)[1]


def test_draft_positions_point_at_the_drafted_token_in_the_context(spied) -> None:
    """ngram_trie's positions index the prompt; the highlighted characters are that token's text."""
    trace, _ = spied
    c0, c1 = trace.context_char_span
    chars = viz.prompt_char_spans(trace.prompt_text, trace.prompt_pieces)
    assert "".join(trace.prompt_text[a:b] for a, b in chars) == trace.prompt_text
    checked = 0
    for k, step in enumerate(trace.steps):
        positions = step.info.get("positions", [])
        assert len(positions) == len(step.tree)
        for node, pos in enumerate(positions):
            if pos < len(trace.prompt_ids):
                assert trace.prompt_ids[pos] == step.tree.tokens[node]
        src = context_sources(trace, k)
        in_context = [n for n, p in enumerate(positions) if p < len(trace.prompt_ids)
                      and c0 <= chars[p][0] and chars[p][1] <= c1]
        assert len(src["accepted"]) + len(src["proposed"]) == len(in_context)
        texts = sorted(trace.prompt_text[c0 + a:c0 + b] for a, b in src["accepted"] + src["proposed"])
        assert texts == sorted(trace.prompt_pieces[positions[n]] for n in in_context)
        checked += len(in_context)
    assert checked > 0


def test_context_highlight_marks_accepted_sources() -> None:
    """A hand-made trace: prompt 'A B C D', context 'B C D'; the draft copied 'C' (accepted) and 'D'."""
    trace = hand_trace("ngram_trie", {"positions": [2, 3]})
    step = trace.steps[0]
    src = context_sources(trace, 0)
    assert src["accepted"] == [(1, 3)] and src["proposed"] == [(3, 5)]   # ' C' and ' D' within 'B C D'
    html = viz.context_highlight_html(trace, 0)
    assert "<b>1</b> accepted" in html and "1 drafted but rejected" in html
    bare = dataclasses.replace(trace, steps=(dataclasses.replace(step, info={}),))
    assert "does not record" in viz.context_highlight_html(bare, 0)
    empty = dataclasses.replace(step, tree=DraftTree.empty(), accepted=(), info={})
    assert "No draft in this step" in viz.context_highlight_html(dataclasses.replace(trace, steps=(empty,)), 0)


def test_run_figures(oracle_trace, spied) -> None:
    for trace in (oracle_trace, spied[0]):
        hist = viz.accepted_hist_figure(trace).data[0]
        assert sum(hist.y) == len(trace.steps)
        assert sum(x * y for x, y in zip(hist.x, hist.y)) == len(trace.output_ids)
        over = viz.tokens_over_time_figure(trace).data[0]
        assert over.y[-1] == len(trace.output_ids)
        assert over.x[-1] == pytest.approx(trace.totals.seconds)
        viz.phase_totals_figure(trace)
    stats = viz.acceptance_by_depth(oracle_trace)
    assert stats and all(a == t for t, a in list(stats.values())[:-1])   # the oracle is never wrong
    assert viz.acceptance_figure(oracle_trace).data[0].y[0] == 1.0


def test_acceptance_by_depth_counts_only_tested_depths() -> None:
    tree = DraftTree((5, 6, 7), (-1, 0, -1), ("context",) * 3)     # 5 -> 6, and 7 beside 5
    def step(i: int, acc: tuple[int, ...]) -> StepRecord:
        return StepRecord(index=i, committed_len=3, tree=tree, accepted=acc, bonus=1,
                          new_tokens=tuple(tree.tokens[a] for a in acc) + (1,), target_top=(0,) * 4,
                          target_prob=(0.5,) * 3, timings={}, wall=0.01)
    trace = Trace("m", "x", {}, {}, "", (1, 2, 3), (step(0, ()), step(1, (0,)), step(2, (0, 1))),
                  (), "", {}, Totals.of([]), "length")
    assert viz.acceptance_by_depth(trace) == {1: (3, 2), 2: (2, 1)}


def test_replayed_trace_draws_the_same(spied) -> None:
    trace, _ = spied
    back = Trace.from_json(trace.to_json())
    k = len(trace.steps) // 2
    assert viz.tree_figure(back, k).to_json() == viz.tree_figure(trace, k).to_json()
    np.testing.assert_array_equal(viz.mask_view(back, k)[0], viz.mask_view(trace, k)[0])
    assert viz.context_highlight_html(back, k) == viz.context_highlight_html(trace, k)


def test_compare_rows(oracle_trace, tiny_lm_tok) -> None:
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Say something.")
    vanilla = generate(tiny_lm_tok, prompt, "vanilla", None, DecodingConfig(max_new_tokens=20))
    other = dataclasses.replace(oracle_trace, output_ids=oracle_trace.output_ids[:5] + (0,) + oracle_trace.output_ids[6:])
    rows = viz.compare_rows([[vanilla], [oracle_trace], [other]])
    assert [r.identical for r in rows] == ["yes", "yes", "no"]
    assert rows[0].speedup == pytest.approx(1.0)
    assert rows[1].speedup == pytest.approx(oracle_trace.totals.tokens_per_s / vanilla.totals.tokens_per_s)
    assert rows[2].first_difference.startswith("#5:")
    sampled = dataclasses.replace(vanilla, decoding={**vanilla.decoding, "temperature": 0.7})
    assert viz.compare_rows([[sampled], [oracle_trace]])[1].identical == "n/a (sampling)"
    fig = viz.compare_figure(rows)
    assert list(fig.data[0].x) == ["vanilla", "oracle", "oracle"] and len(fig.data) == 3
    assert rows[1].alpha is None and rows[1].expected_priced is None        # not a model drafter


def test_compare_rows_price_a_model_drafters_verify(tiny_lm_tok) -> None:
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Say something.")
    vanilla = generate(tiny_lm_tok, prompt, "vanilla", None, DecodingConfig(max_new_tokens=16))
    drafted = generate(tiny_lm_tok, prompt, "self_draft", {"k": 1}, DecodingConfig(max_new_tokens=16))
    row = viz.compare_rows([[vanilla], [drafted]])[1]
    ratio = viz.verify_per_step(drafted) / viz.verify_per_step(vanilla)
    assert row.expected_speedup == pytest.approx(drafted.draft_metrics()["expected_speedup"])
    assert row.expected_priced == pytest.approx(row.expected_speedup / ratio)
    assert len(row.cells()) == len(viz.CompareRow.columns())


def test_compare_names_drafters_as_written() -> None:
    """A drafter's name is a registry name (a plugin may register any string): the compare
    status's Markdown sets it as inline code no backtick, tag or formula in it can leave
    (markup.md_code), and the figure's bars are labelled with it as written (plot_text)."""
    from specviz.viz.markup import md_code, plot_text

    bad = '`<img src=x onerror="alert(1)">` **b** [x](javascript:alert(1)) $$x$$'
    vanilla = dataclasses.replace(hand_trace("vanilla"), dtype="<b>bf16</b>")
    runs = [[vanilla]] + [[dataclasses.replace(hand_trace(f"{bad} {verdict}"), divergence={
        "verdict": verdict, "position": 1, "shared_tokens": 1, "dtype": "bfloat16"})]
        for verdict in ("near-tie", "mismatch")]
    notes = viz.divergence_notes(runs)
    assert f"{md_code(bad + ' near-tie')} (#1)" in notes and f"{md_code(bad + ' mismatch')} (#1)." in notes
    assert f"rounding in {md_code('<b>bf16</b>')}" in notes
    for raw in ("<img", "<b>", "**b**", "[x]", "$$"):
        assert raw not in notes, raw
    assert re.search(r"(?<!\\)`", notes) is None                # every backtick escaped: no code span ends
    rows = [viz.CompareRow(name, 1.0, 1.0, 1.0, 1, 1, "yes", "") for name in ("vanilla", bad)]
    fig = viz.compare_figure(rows)
    assert all(list(bars.x) == ["vanilla", plot_text(bad)] for bars in fig.data)
    assert list(fig.data[0].marker.color) == ["#868e96", "#1c7ed6"]


def test_md_block_cannot_be_closed_by_its_text() -> None:
    from specviz.viz.markup import md_block

    text = "a\n```\n<b>x</b>\n`````\n~~~"
    block = md_block(text)
    assert block == f"``````text\n{text}\n``````"
    assert md_block("plain") == "```text\nplain\n```"


def test_palette_has_a_stable_fallback_for_unknown_sources() -> None:
    assert source_colour("context") == SOURCE_COLOURS["context"]
    assert source_colour("some-new-drafter") == source_colour("some-new-drafter")
    assert source_colour("some-new-drafter").startswith("#")
    assert "some-new-drafter" in viz.legend_html(["some-new-drafter"])


def test_run_summary_gives_the_verify_priced_expectation(tiny_lm_tok) -> None:
    from specviz.ui.summary_tab import about_markdown
    prompt = build_prompt(tiny_lm_tok.tokenizer, "Say something.")
    trace = generate(tiny_lm_tok, prompt, "self_draft", {"k": 1}, DecodingConfig(max_new_tokens=12))
    m = trace.draft_metrics()
    text = about_markdown(trace)
    assert f"**{m['expected_speedup']:.2f}x**" in text
    assert f"costs {m['verify_ratio']:.2f} plain steps" in text and f"priced so, **{m['priced']:.2f}x**" in text
    plain = about_markdown(generate(tiny_lm_tok, prompt, "vanilla", None, DecodingConfig(max_new_tokens=4)))
    assert "model drafting" not in plain


def test_every_token_kind_reads_in_both_themes() -> None:
    """Token spans set both colours; each (background, text) pair has a WCAG contrast of at
    least 4.5 in the light and the dark theme, unknown sources included; the page's CSS
    defines every variable the spans read, for both themes."""
    from specviz.viz.palette import _FALLBACK, contrast_ratio, theme_css, token_colours, token_style
    sources = [*SOURCE_COLOURS, *(f"new-source-{i}" for i in range(40))]
    for dark in (False, True):
        pairs = [token_colours("bonus", "", dark), token_colours("plain", "", dark)]
        pairs += [token_colours("draft", s, dark) for s in sources]
        for bg, fg in pairs:
            assert contrast_ratio(bg, fg) >= 4.5, (dark, bg, fg)
    css = theme_css()
    light, dark = css.split(".dark{", 1)
    for style in [token_style("bonus"), token_style("plain"), *(token_style("draft", s) for s in sources)]:
        assert "color:var(--sv-ink" in style and "background:var(" in style
        var = style.split("background:var(", 1)[1].split(",", 1)[0]
        assert f"{var}:" in light and f"{var}:" in dark, var
    assert len({token_colours("draft", s)[0] for s in SOURCE_COLOURS}) == len(SOURCE_COLOURS)
    assert contrast_ratio("#ffffff", "#000000") == pytest.approx(21.0)
    assert len(_FALLBACK) == 8


def test_figures_have_transparent_backgrounds(spied) -> None:
    trace, _ = spied
    for fig in (viz.tree_figure(trace, 0), viz.mask_figure(trace, 0), viz.step_timing_figure(trace, 0)):
        layout = fig.layout.template.layout
        assert layout.paper_bgcolor == "rgba(0,0,0,0)" and layout.plot_bgcolor == "rgba(0,0,0,0)"


# ---- the browser's data: every step's views, the jumps, the strips --------------------------

def test_step_views_hold_each_steps_python_figures(spied) -> None:
    """The bundle the browser steps through is the server's figures for each step, without
    the shared template, which it carries once."""
    trace, _ = spied
    views = viz.step_views(trace)
    assert views["n"] == len(trace.steps) == len(views["steps"])
    assert views["template"] == viz.template_json() and views["template"]["layout"]
    for k in (0, len(trace.steps) // 2, len(trace.steps) - 1):
        v = views["steps"][k]
        assert v["tree"] == viz.figure_json(viz.tree_figure(trace, k))
        assert v["mask"] == viz.figure_json(viz.mask_figure(trace, k))
        assert v["timing"] == viz.figure_json(viz.step_timing_figure(trace, k))
        assert "template" not in v["tree"]["layout"]
        assert v["md"] == viz.step_markdown(trace, k) and v["narrative"] == viz.step_narrative(trace, k)
        assert v["context"] == viz.context_highlight_html(trace, k)
    assert viz.step_views(None) is None


def test_jump_targets_find_the_steps_that_matter(spied, oracle_trace) -> None:
    for trace in (spied[0], oracle_trace):
        j = viz.jump_targets(trace)
        steps = trace.steps
        assert j["rejections"] == [s.index for s in steps if len(s.tree) and not s.accepted]
        assert len(steps[j["longest"]].accepted) == max(len(s.accepted) for s in steps)
        assert all(len(s.accepted) < len(steps[j["longest"]].accepted) for s in steps[:j["longest"]])
        assert len(steps[j["widest"]].tree.leaves()) == max(len(s.tree.leaves()) for s in steps)
        work = [s.wall - s.timings.get("prefill", 0.0) for s in steps]
        assert work[j["slowest"]] == max(work)
        assert j["divergence"] is None                        # not compared with vanilla
    # a run that left vanilla's text at output token p: the step that committed token p
    trace = oracle_trace
    for p in (0, 5, trace.totals.new_tokens - 1):
        k = viz.jump_targets(dataclasses.replace(trace, divergence={"position": p}))["divergence"]
        before = sum(len(s.new_tokens) for s in trace.steps[:k])
        assert before <= p < before + len(trace.steps[k].new_tokens)


def test_acceptance_strip_has_a_cell_per_output_token(spied) -> None:
    import re

    trace, _ = spied
    html = viz.acceptance_strip_html(trace)
    cells = re.findall(r'<span data-step="(\d+)" title="token (\d+) [^"]*?· (\d+ accepted|no draft)"', html)
    assert len(cells) == trace.totals.new_tokens
    pairs = viz.token_acceptance(trace)
    for (step, _i, what), (s, n) in zip(cells, pairs):
        assert int(step) == s and what == ("no draft" if n is None else f"{n} accepted")
    assert viz.acceptance_strip_html(None) == ""


def test_compare_strips_align_every_drafter_on_vanillas_text(oracle_trace, tiny_lm_tok) -> None:
    from specviz.viz.strips import ROW_NAME

    prompt = build_prompt(tiny_lm_tok.tokenizer, "Say something.")
    vanilla = generate(tiny_lm_tok, prompt, "vanilla", None, DecodingConfig(max_new_tokens=20))
    changed = dataclasses.replace(oracle_trace, output_ids=(*oracle_trace.output_ids[:5], -1,
                                                            *oracle_trace.output_ids[6:]))
    html = viz.compare_strips_html([vanilla, oracle_trace, changed])
    n = len(vanilla.output_ids)
    assert html.count('class="sv-tok"') == n                       # a cell per vanilla token
    assert html.count("<i ") == 2 * n                                # a bar per drafter under each
    assert html.count("differs from vanilla here") == n - 5              # from the changed token on
    blocks = html.count("<table")
    assert blocks >= 1 and html.count('scope="row"') == 3 * blocks     # each block's rows named: vanilla, both drafters
    assert html.count(f'scope="row" style="{ROW_NAME}">oracle</th>') == 2 * blocks
    assert "border-left:1px solid" in html                            # a rule between tokens
    assert viz.compare_strips_html([vanilla]) == ""


# ---- the tree's labels and the landing run --------------------------------------------------

def _label_boxes(fig) -> list[tuple[float, float, float, str]]:
    """(row y, x0 px, x1 px, label) of every right-hand label, at the width labels are fitted to."""
    from specviz.viz.tree import LABEL_CHAR_PX, MARKER_GAP_PX, TREE_PLOT_PX
    lo, hi = fig.layout.xaxis.range
    px = TREE_PLOT_PX / (hi - lo)
    out = []
    for t in fig.data:
        if t.name in ("draft nodes", "bonus"):
            for x, y, label in zip(t.x, t.y, t.text):
                if label:
                    x0 = (x - lo) * px
                    out.append((y, x0, x0 + MARKER_GAP_PX + len(label) * LABEL_CHAR_PX, label))
    return out


def test_tree_labels_never_overlap_on_the_landing_runs_widest_steps() -> None:
    from specviz.ui.landing import landing_trace
    from specviz.viz.tree import tree_positions

    trace = landing_trace()
    widest = sorted(range(len(trace.steps)), key=lambda i: -len(trace.steps[i].tree.leaves()))[:8]
    for k in widest:
        step = trace.steps[k]
        xs, ys, bonus = tree_positions(step)
        if bonus is not None:                     # the star has a place of its own on its row
            assert all(not (x == bonus[0] and y == bonus[1]) for x, y in zip(xs, ys)), k
        boxes = sorted(_label_boxes(viz.tree_figure(trace, k)))
        for (ya, _a0, a1, la), (yb, b0, _b1, lb) in zip(boxes, boxes[1:]):
            if ya == yb:
                assert a1 <= b0 + MARKER_SLACK_PX, (k, la, lb)


MARKER_SLACK_PX = 0.5


def test_a_shipped_trace_agrees_with_its_recorded_cost_model() -> None:
    """The landing run's forward times are the machine's: each step within STEP_FACTOR of the
    cost model recorded with it, the median within MEDIAN_FACTOR. Fails for a run recorded
    on a busy machine: re-record it on a quiet one with `python scripts/record_landing.py`."""
    from specviz.analysis.landing_check import cost_model_disagreements
    from specviz.ui.landing import landing_recording, landing_trace

    recording = landing_recording()
    assert recording is not None, "landing.recording.json is missing: python scripts/record_landing.py"
    assert recording["run"]["drafter"] == landing_trace().drafter
    bad = cost_model_disagreements(landing_trace(), recording["cost_model"])
    assert not bad, "re-record on a quiet machine (python scripts/record_landing.py): " + "; ".join(bad)


def test_the_cost_model_check_catches_a_busy_recording(spied) -> None:
    from specviz.analysis.landing_check import cost_model_disagreements, forward_rows

    trace, _ = spied
    timed = [s for s in trace.steps if s.timings.get("verify.forward")]
    rows = sorted({forward_rows(s) for s in timed})
    per_row = {m: sorted(s.timings["verify.forward"] for s in timed if forward_rows(s) == m) for m in rows}
    cost = {"past_len": len(trace.prompt_ids), "rows": rows, "seconds": [v[len(v) // 2] for v in per_row.values()]}
    slow = dict(cost, seconds=[s / 10 for s in cost["seconds"]])     # the run 10x slower than its machine
    assert any("median" in line for line in cost_model_disagreements(trace, slow))
    steps = list(trace.steps)
    k = timed[0].index
    steps[k] = dataclasses.replace(steps[k], timings=dict(steps[k].timings, **{"verify.forward": 20 * per_row[forward_rows(steps[k])][-1]}))
    assert f"step {k}:" in " ".join(cost_model_disagreements(dataclasses.replace(trace, steps=tuple(steps)), cost))


# ---- honest debugging views: what was not measured, named sources, labels that fit ----------

def test_positions_never_reached_read_na_not_zero() -> None:
    """A position no draft reached (num_tested_per_pos 0) has no rate given the earlier ones: the
    figure and the run summary's counters say n/a there, not 0.00."""
    from specviz.core.position_metrics import PositionCounts
    from specviz.viz.draft_head import conditional_cells, positions_figure, vllm_counters_line

    counts = PositionCounts(num_drafts=4, num_draft_tokens=12, num_accepted_tokens=3,
                            num_accepted_tokens_per_pos=(2, 1, 0, 0), num_tested_per_pos=(4, 2, 1, 0), num_steps=4)
    assert conditional_cells(counts) == [0.5, 0.5, 0.0, None]        # tested and none accepted: 0; never tested: n/a
    fig = positions_figure(counts)
    cond = fig.data[1]
    assert list(cond.text) == ["", "", "", "n/a"] and "n/a" in cond.customdata[3][2]
    line = vllm_counters_line(counts)
    assert "given every earlier position accepted [0.50, 0.50, 0.00, n/a]" in line
    assert "<br>" in fig.layout.title.text          # the long part on a line of its own: a narrow plot keeps it


def test_the_doctors_first_table_has_a_header() -> None:
    from types import SimpleNamespace

    report = SimpleNamespace(gpu_name="", model_id="m", device="cpu", dtype="float32", attention="sdpa",
                             torch_version="2", torch_threads=2, transformers_version="5", cpu_linear=True,
                             peak_memory_mb=None, curve_reading="", max_new_tokens=8, checks=[], ok=True,
                             seconds=1.0, notes=[])
    table = viz.doctor_markdown(report).splitlines()
    assert table[0] == "| setting | value |" and table[2] == "| model | <code>m</code> |"


def test_a_jump_with_nowhere_to_go_says_why(oracle_trace) -> None:
    notes = viz.jumps.jump_notes(oracle_trace)
    assert "not compared with vanilla" in notes["divergence"] and "Compare drafters" in notes["divergence"]
    identical = dataclasses.replace(oracle_trace, divergence={"verdict": "identical", "position": None})
    assert "exact output" in viz.jumps.jump_notes(identical)["divergence"]
    assert "divergence" not in viz.jumps.jump_notes(dataclasses.replace(oracle_trace, divergence={"position": 3}))
    assert viz.step_views(oracle_trace)["jump_notes"] == notes


def test_step_zero_says_where_its_nodes_were_copied_from() -> None:
    """The landing run's step 0 matched text just outside the context; its nodes' label is the
    drafter's ("context", for all of the prompt): the narrative counts where each was copied from."""
    from specviz.ui.landing import landing_trace

    trace = landing_trace()
    text = viz.step_narrative(trace, 0)
    src = context_sources(trace, 0)
    inside = len(src["accepted"]) + len(src["proposed"])
    assert "outside your context" in text and f"context {len(trace.steps[0].tree)}" in text
    assert f"by where each node's token was copied from: {inside} in your context" in text
    assert "elsewhere in the prompt, in the chat template or the message" in text


def test_tree_labels_fit_the_width_they_are_drawn_at() -> None:
    """The figure carries its full labels for the page to fit at its own width; fit_labels at a
    wider plot cuts fewer of them, and never one that ends a row before the plot's edge."""
    from specviz.ui.landing import landing_trace
    from specviz.viz.tree import fit_labels

    trace = landing_trace()
    k = max(range(len(trace.steps)), key=lambda i: len(trace.steps[i].tree.leaves()))
    fig = viz.tree_figure(trace, k)
    fit = fig.layout.meta["fit_labels"]
    xs = [x for t in fit["traces"] for x in fig.data[t].x]
    ys = [y for t in fit["traces"] for y in fig.data[t].y]
    full = [lab for labels in fit["labels"] for lab in labels]
    lo, hi = fig.layout.xaxis.range
    narrow, wide = (fit_labels(xs, ys, full, hi - lo, px, right=hi) for px in (300, 1400))
    assert sum(a != b for a, b in zip(full, narrow)) > sum(a != b for a, b in zip(full, wide))
    assert all(w == f or w.endswith("…") for w, f in zip(wide, full))
    drawn = [t for t in fit["traces"] for t in fig.data[t].text]
    assert drawn == [viz.markup.plot_text(x) for x in fit_labels(xs, ys, full, hi - lo, right=hi)]


def test_bar_numbers_sit_outside_their_bars(spied) -> None:
    trace, _ = spied
    for fig in (viz.step_timing_figure(trace, 0), viz.phase_totals_figure(trace), viz.acceptance_figure(trace)):
        assert fig.data[0].textposition == "outside"


# ---- the whole proposal in view (StepRecord.proposal) ---------------------------------------------

def _cut_trace(n_cut: int = 3) -> Trace:
    """hand_trace's step, its 2-node chain being the kept part of a proposal with n_cut more
    nodes: a sibling of each chain node, then a chain below the second."""
    from specviz.core.proposal import Proposal
    trace = hand_trace("eagle", {"candidates": 9})
    step = trace.steps[0]
    tokens, parents = [3, 4], [-1, 0]
    for k in range(n_cut):
        tokens.append(100 + k)
        parents.append(-1 if k == 0 else (0 if k == 1 else len(tokens) - 2 if k > 2 else 1))
    whole = DraftTree(tuple(tokens), tuple(parents), ("context",) * len(tokens))
    chance = tuple(round(0.9 ** (d + 1) / (1 + i), 4) for i, d in enumerate(whole.depths))
    step = dataclasses.replace(step, proposal=Proposal(whole, (0, 1), chance))
    text = {**trace.token_text, **{100 + k: f"c{k}" for k in range(n_cut)}}
    return dataclasses.replace(trace, steps=(step,), token_text=text)


def test_the_tree_draws_the_cut_nodes_faintly_with_kept_n_of_m() -> None:
    """A cut step's figure draws its whole proposal: the verified nodes as always (their own
    trace, in their places in the proposal's layout), the cut ones pale with their chance in the
    hover, and the title says "kept 2 of 5 proposed"; the step's notes and its narrative say so."""
    trace = _cut_trace(3)
    fig = viz.tree_figure(trace, 0)
    nodes = next(t for t in fig.data if t.name == "draft nodes")
    cut = next(t for t in fig.data if t.name == "proposed, cut")
    assert len(nodes.x) == 2 and list(nodes.customdata) == [0, 1] and len(cut.x) == 3
    assert cut.opacity < 1 and list(cut.customdata) == [2, 3, 4]
    assert "kept 2 of 5 proposed" in fig.layout.title.text
    assert all("cut: not verified" in h and "chance" in h for h in cut.hovertext)
    assert [lab for group in fig.layout.meta["fit_labels"]["labels"] for lab in group][:3] == ["c0", "c1", "c2"]
    xs, ys, _ = viz.tree.tree_positions(trace.steps[0])
    assert (list(nodes.x), list(nodes.y)) == (xs, ys)
    points = {(x, y) for t in (nodes, cut) for x, y in zip(t.x, t.y)}
    assert len(points) == 5                                    # no two nodes in one place
    assert "**kept 2 of 5 proposed**" in viz.step_markdown(trace, 0)
    assert "its sizing kept 2" in viz.step_narrative(trace, 0) and "found 9 candidates and proposed 5" in viz.step_narrative(trace, 0)
    plain = viz.tree_figure(hand_trace("eagle"), 0)             # no proposal: no cut trace, the old title
    assert not any(t.name == "proposed, cut" for t in plain.data) and "2 draft node(s)" in plain.layout.title.text


def test_a_huge_proposal_is_drawn_with_its_likeliest_nodes() -> None:
    from specviz.viz.tree import PROPOSAL_DRAWN
    trace = _cut_trace(PROPOSAL_DRAWN + 50)
    fig = viz.tree_figure(trace, 0)
    cut = next(t for t in fig.data if t.name == "proposed, cut")
    assert len(cut.x) + 2 <= PROPOSAL_DRAWN + 2 and f"of {PROPOSAL_DRAWN + 52} proposed" in fig.layout.title.text
    assert "likeliest drawn" in fig.layout.title.text


def test_positions_no_draft_reached_say_never_tested_and_what_the_sizing_cut_there() -> None:
    """The per-position view names the positions no verified draft reached ("never tested"),
    with the steps whose proposal had a node there that the sizing cut."""
    from specviz.viz.draft_head import cut_positions, draft_head_lines, trace_positions_figure
    trace = _cut_trace(3)                      # verified to depth 2, proposed to depth 3 (and 4?)
    deepest = max(trace.steps[0].proposal.tree.depths)
    assert cut_positions(trace) == [0, 0] + [1] * (deepest - 2)
    fig = trace_positions_figure(trace)
    ticks = list(fig.layout.xaxis.ticktext)
    assert len(ticks) == deepest and ticks[2] == "2<br>never tested<br>(1 cut)"
    assert "never tested" in fig.data[0].hovertext[2] and "cut by the sizing" in fig.data[0].hovertext[2]
    line = next(x for x in draft_head_lines(trace) if "never tested" in x)
    assert "position 2**" in line and "at 1 step(s) at position 2" in line and "sizing cut them" in line
