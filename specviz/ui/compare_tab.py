"""The "Compare drafters" tab: vanilla plus the selected drafters on the same input, run one
after another (rounds interleaved, after one untimed warm-up), then a table and bar charts."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterator

import gradio as gr

from .. import viz
from ..core.decoding import DecodingConfig
from ..analysis.divergence import with_divergence
from ..drafters import baseline, ordered
from ..errors import ConfigError
from ..files.user_values import whole_number
from ..core.trace import Trace
from ..viz.markup import md_code, md_text
from . import runner
from .errors import shown_to_user
from .gpu import gpu
from .session import Session
from .setup_panel import SetupPanel

WARMUP_TOKENS = 4
MAX_ROUNDS = 5              # the slider's maximum; a request through the API is held to it too


@dataclass
class CompareTab:
    drafters: gr.CheckboxGroup
    rounds: gr.Slider
    run: gr.Button
    status: gr.Markdown
    table: gr.Dataframe
    plot: gr.Plot
    pick: gr.Dropdown
    strips: gr.HTML | None = None      # each drafter's acceptance strip, aligned on vanilla's text


def build_compare_tab() -> CompareTab:
    base = baseline().name
    peers = [s for s in ordered() if not s.is_baseline]
    gr.Markdown(f"Runs **{base}** (plain decoding) and each selected drafter on the current model, "
                "input and settings. Each drafter uses the settings in the panel on the left. "
                f"Speedup is the ratio to {base} measured in the same comparison; tokens/s is the median "
                "over the rounds, which are interleaved. Under greedy decoding every drafter must give "
                f"{base}'s exact output.")
    with gr.Row():
        drafters = gr.CheckboxGroup([s.name for s in peers], value=[s.name for s in peers if s.preselected],
                                    label=f"Drafters to compare with {base}", scale=3)
        rounds = gr.Slider(1, MAX_ROUNDS, value=1, step=1, label="Rounds", scale=1,
                           info="each round runs every drafter once")
    run = gr.Button("Compare", variant="primary", elem_id="compare-btn")
    status = gr.Markdown(elem_id="compare-status")
    table = gr.Dataframe(headers=viz.CompareRow.columns(), interactive=False, elem_id="compare-table")
    plot = gr.Plot(label="Comparison")
    strips = gr.HTML(elem_id="compare-strips")
    pick = gr.Dropdown([], label="Open a compared run in the inspector and summary", interactive=True)
    return CompareTab(drafters, rounds, run, status, table, plot, pick, strips)


def make_compare_handler(panel: SetupPanel):
    @gpu
    def compare(session: Session, chosen: list[str], rounds: float, *values: Any
                ) -> Iterator[tuple[Any, Any, Any, Any, Session]]:
        session = session if isinstance(session, Session) else Session()
        session.stop_requested = False
        base_name = baseline().name
        names = list(dict.fromkeys([base_name, *(chosen or [])]))       # each drafter once, however often asked
        with shown_to_user():
            if whole_number(rounds, 1, MAX_ROUNDS) is None:
                raise ConfigError("rounds", f"must be a whole number from 1 to {MAX_ROUNDS}, got {str(rounds)[:20]}")
            base = panel.spec(values)
            specs = {n: base.with_drafter(n, panel.drafter_form.values(n, values[4 + len(panel.decoding_form.components):]))
                     for n in names}
            prepared = {n: runner.prepare(specs[n]) for n in names}   # each checked once, before any load
            yield f"… loading {md_code(base.model_id)} and warming up...", gr.skip(), gr.skip(), gr.skip(), session
            runner.run_to_end(replace(base.with_drafter(base_name, {}),             # untimed warm-up
                                      decoding=DecodingConfig(max_new_tokens=WARMUP_TOKENS)))
            runs: dict[str, list[Trace]] = {n: [] for n in names}
            total = int(rounds) * len(names)
            for r in range(int(rounds)):
                for n in names:
                    if session.stop_requested:
                        break
                    done = sum(map(len, runs.values()))
                    yield (f"… round {r + 1}: running {md_code(n)} ({done + 1}/{total})...", gr.skip(), gr.skip(),
                           gr.skip(), session)
                    # a drafter that replays the baseline's output gets this round's (run first: names[0])
                    reference = runs[base_name][-1].output_ids if prepared[n].drafter.wants_reference else None
                    runs[n].append(runner.run_to_end(prepared[n], session.drafter_store, reference))
        done_runs = [runs[n] for n in names if runs[n]]
        if not done_runs or not runs[base_name]:
            yield (f"■ stopped before {md_code(base_name)} finished: nothing to compare.", gr.skip(), gr.skip(),
                   gr.skip(), session)
            return
        k = min(len(v) for v in done_runs)
        ref = runs[base_name][0]
        done_runs = [[with_divergence(t, ref)[0] for t in v] for v in done_runs]   # each run carries it
        rows = viz.compare_rows([v[:k] for v in done_runs])
        session.compared = {v[0].drafter: v[0] for v in done_runs}
        # names as written (markup.py): a drafter's is a registry name (a plugin's: any string)
        note = (f"✓ {k} round(s) on {md_code(ref.model_id)} ({md_text(ref.device)}, {md_text(ref.dtype)}), "
                f"{ref.totals.new_tokens} {md_text(base_name)} tokens, one warm-up excluded."
                + (" Stopped early." if session.stop_requested else "")
                + viz.divergence_notes(done_runs))
        yield (note, [r.cells() for r in rows], viz.compare_figure(rows),
               gr.update(choices=list(session.compared), value=None), session)

    return compare


def render_compare_strips(session: Session) -> str:
    """The aligned acceptance strips of the last comparison (vanilla first)."""
    if not isinstance(session, Session) or not session.compared:
        return ""
    base = baseline().name
    runs = [session.compared[base]] if base in session.compared else []
    return viz.compare_strips_html(runs + [t for n, t in session.compared.items() if n != base])


def pick_compared(session: Session, name: str | None) -> Session:
    if isinstance(session, Session) and name in session.compared:
        session.trace = session.compared[name]
    return session
