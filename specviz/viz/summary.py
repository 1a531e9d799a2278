"""Short Markdown texts: live counters of a run and the details of one step."""
from __future__ import annotations

from typing import Mapping, Sequence

from ..core.trace import StepRecord, Trace
from .markup import md_code, md_text
from .palette import show_token
from .tree import kept_of, node_status


def counters_markdown(steps: Sequence[StepRecord], vanilla_tps: float | None = None,
                      status: str = "") -> str:
    """tokens/s, steps, mean accepted tokens per step, and the speedup against a vanilla run
    of the same input measured in this session (when there is one)."""
    new = sum(len(s.new_tokens) for s in steps)
    seconds = sum(s.wall for s in steps)
    tps = new / seconds if seconds > 0 else 0.0
    mean = new / len(steps) if steps else 0.0
    parts = [f"**{new}** tokens", f"**{len(steps)}** steps", f"**{tps:.1f}** tokens/s",
             f"mean accepted per step **{mean:.2f}**"]
    if vanilla_tps:
        parts.append(f"speedup vs vanilla **{tps / vanilla_tps:.2f}x**")
    return (f"{status}  \n" if status else "") + " · ".join(parts)


def step_markdown(trace: Trace, step_index: int) -> str:
    s = trace.steps[step_index]
    text: Mapping[int, str] = trace.token_text
    status = node_status(s)
    tested = sum(st != "unreached" for st in status)
    acc = "".join(trace.step_pieces(step_index)[:len(s.accepted)])   # the accepted text in its place
    lines = [f"**Step {s.index}** of {len(trace.steps) - 1} · {len(s.tree)} draft node(s), "
             f"{tested} tested by the target, **{len(s.accepted)} accepted** + bonus "
             f"{md_code(show_token(text.get(s.bonus, '?')))} · committed {len(s.new_tokens)} token(s) "
             f"· {s.wall * 1e3:.1f} ms"]
    if s.proposal is not None:          # the sizing cut the tree (core/proposal.py; faint in the tree)
        p = s.proposal
        lines.append(f"**{kept_of(s)}**: the drafter proposed {len(p.tree)} node(s) and its sizing kept "
                     f"{len(p.kept)}; the {p.cut} cut are drawn faintly in the tree, never verified")
    if acc:
        lines.append(f"accepted draft: “{md_text(acc[:300])}”" + ("…" if len(acc) > 300 else ""))
    notes = {k: v for k, v in s.info.items() if k != "positions"}
    if notes:
        lines.append("drafter notes: " + ", ".join(f"{md_text(k)}={md_text(v)}" for k, v in notes.items()))
    if s.stop:
        lines.append(f"stopped here: {md_text(s.stop)}")
    return "  \n".join(lines)
