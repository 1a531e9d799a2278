"""`specviz doctor`: what this machine runs, how fast a forward is, and whether the drafters
are exact and fast on it, as one report (a frozen dataclass; the CLI prints it as a table or
JSON, the explorer's "Machine" tab shows it with the cost curve).

    report = run_doctor("embedded", device="auto", dtype="auto")
    print(format_report(report))

It reports:
- the set-up: device (and GPU name), dtype, attention implementation, torch and transformers
  versions, torch threads, whether the CPU few-row linear trick (cpu_linear.py) is on;
- the forward-cost curve: one target forward of 1, 2, 4, ... 64 rows over a KV cache of the
  current context length (the first check prompt's, unless given), measured now (best of
  two, after a warm-up round), beside the cost model calibrated once per model (on first use)
  (cost.py, over an 800-token cache), and their ratio;
- what the curve says (`read_curve`): the widest forward's cost over one row's. Near 1, the
  forward is bound by the host launching kernels (a 135M model on a GPU: 1.09 on the H100 of
  2026-11-26), so a wide draft costs almost nothing to verify and a lower precision is not
  faster; far above 1, by arithmetic (a CPU), so each drafted node costs;
- a 3-prompt check per drafter: each drafter against vanilla on the same prompts (the
  explorer's worked examples with a context), interleaved (vanilla, then each drafter, per
  prompt, after one untimed warm-up), greedy, few new tokens: identical / near-tie /
  mismatch (divergence.py), the speedup, and the speedup over the text shared with vanilla.
"""
from __future__ import annotations

import json
import time
import tomllib
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..engine.service import RunRequest

if TYPE_CHECKING:
    from ..core.trace import Trace
    from ..models import LoadedModel
    from .divergence import Divergence

ROWS = (1, 2, 4, 8, 16, 32, 64)
CHECK_PROMPTS = 3
MAX_NEW_TOKENS = 32
# the checks' runs record what the bench records: their timings and the logits that tell a near-tie
# from a bug, at the bench's cost (engine/record.py)
CHECK_RECORDER = "bench"


@dataclass(frozen=True)
class CostPoint:
    rows: int
    measured_s: float            # one forward of this many rows, now, at the report's context length
    predicted_s: float           # the cost model calibrated once per model (cost.py) for the same rows

    @property
    def ratio(self) -> float:
        return self.measured_s / self.predicted_s if self.predicted_s > 0 else float("nan")


def read_curve(curve: Sequence[CostPoint], host_bound: float = 1.5, arithmetic_bound: float = 4.0) -> str:
    """What the forward-cost curve means for drafting on this machine, in a sentence ("" for a
    curve of one point): the widest forward's cost over the narrowest's, below `host_bound`
    bound by the host, above `arithmetic_bound` by the arithmetic."""
    if len(curve) < 2 or curve[0].measured_s <= 0:
        return ""
    ratio = curve[-1].measured_s / curve[0].measured_s
    head = f"a forward of {curve[-1].rows} rows costs {ratio:.2f}x one of {curve[0].rows}: "
    if ratio < host_bound:
        return head + ("bound by the host launching kernels, not by arithmetic; a wide draft costs almost "
                       "nothing to verify, and a lower precision will not make a step faster (bfloat16 "
                       "and float16 add casts)")
    if ratio > arithmetic_bound:
        return head + ("bound by arithmetic; every drafted node costs, so a draft sized to what is "
                       "accepted pays (the drafters' tree-sizing settings)")
    return head + "partly bound by arithmetic; each drafted node costs a little"


@dataclass(frozen=True)
class DrafterCheck:
    drafter: str
    prompts: int
    identical: int               # prompts whose output equals vanilla's
    near_ties: int               # ... that left vanilla's text at a near-tie (rounding)
    mismatches: int              # ... at a mismatch: a bug to report
    speedup: float               # vanilla's seconds / the drafter's, all prompts pooled
    shared_speedup: float | None  # the same over the tokens each prompt shares with vanilla
    verdicts: tuple[str, ...]    # per prompt: "identical", "near-tie at #12", ...
    mean_accepted: float         # new tokens per step

    @property
    def shared_text(self) -> str:
        """shared_speedup as shown (e.g. "1.31x"; "n/a" when there is none)."""
        return "n/a" if self.shared_speedup is None else f"{self.shared_speedup:.2f}x"


@dataclass(frozen=True)
class DoctorReport:
    model_id: str
    device: str
    gpu_name: str | None
    dtype: str
    attention: str
    torch_version: str
    transformers_version: str
    torch_threads: int
    cpu_linear: bool
    context_len: int
    cost_curve: tuple[CostPoint, ...]
    max_new_tokens: int
    checks: tuple[DrafterCheck, ...]
    peak_memory_mb: float | None   # peak GPU memory of the checks (None off a GPU)
    seconds: float                 # the whole report, model load included
    notes: tuple[str, ...] = field(default_factory=tuple)
    device_map: dict[str, str] | None = None   # the target's accelerate device map, if split
    compile_step: str = "off"      # the verify step the checks ran (models/static_step.py)

    @property
    def ok(self) -> bool:
        """No mismatch (near-ties are rounding, not bugs)."""
        return all(c.mismatches == 0 for c in self.checks)

    @property
    def curve_reading(self) -> str:
        return read_curve(self.cost_curve)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for point, raw in zip(self.cost_curve, d["cost_curve"]):
            raw["ratio"] = point.ratio
        d["ok"] = self.ok
        d["curve_reading"] = self.curve_reading
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def check_prompts(n: int = CHECK_PROMPTS) -> list[tuple[str, str, str]]:
    """(name, context, message) of the first n worked examples that have a context."""
    from ..files.resources import data_path

    path = data_path("presets.toml")
    presets = tomllib.loads(path.read_text(encoding="utf-8")).get("preset", []) if path.is_file() else []
    with_context = [(p["name"], p.get("context", "").strip(), p["message"].strip())
                    for p in presets if p.get("context", "").strip()]
    if not with_context:   # a package built without its data files
        with_context = [("fallback", "The quick brown fox jumps over the lazy dog. " * 8,
                         "Repeat the text above.")]
    return (with_context * n)[:n]


def cost_curve(lm: LoadedModel, context_len: int, rows: Sequence[int] = ROWS) -> tuple[CostPoint, ...]:
    """Measure one forward per row count over a `context_len` cache, beside the load-time model."""
    from ..models.cost import calibrate

    now = calibrate(lm.model, past_len=context_len, sizes=tuple(rows))
    return tuple(CostPoint(m, s, lm.cost_model().calibrated(m)) for m, s in zip(now.sizes, now.seconds))


def default_drafters() -> tuple[str, ...]:
    """The drafters checked when none are named: those the registry preselects for comparisons
    (DrafterSpec.preselected, as the UI's compare tab), in list order, the baseline left out
    (every check runs it as the reference)."""
    from ..drafters import ordered

    return tuple(s.name for s in ordered() if s.preselected and not s.is_baseline)


def drafter_checks(lm: LoadedModel, requests: Sequence[RunRequest], drafters: Sequence[str],
                   max_new_tokens: int) -> tuple[DrafterCheck, ...]:
    """Each drafter against the baseline (vanilla) on each request's prompt, interleaved, greedy,
    every run through the run service (engine/service.py) on the loaded `lm`."""
    from dataclasses import replace

    from ..core.decoding import DecodingConfig
    from ..engine import service
    from .divergence import IDENTICAL, MISMATCH, NEAR_TIE, explain

    decoding = DecodingConfig(max_new_tokens=max_new_tokens)
    base = [replace(service.baseline_request(r), decoding=decoding) for r in requests]
    service.run(replace(base[0], decoding=DecodingConfig(max_new_tokens=4)), lm=lm)     # untimed warm-up
    found: dict[str, list[Divergence]] = {d: [] for d in drafters}
    runs: dict[str, list[Trace]] = {d: [] for d in drafters}
    vanilla = []
    for request, baseline in zip(requests, base):
        ref = service.run(baseline, lm=lm)
        vanilla.append(ref)
        for name in drafters:
            # a drafter that replays the baseline's output (the oracle) gets this prompt's
            trace = service.run(replace(request, drafter=name, decoding=decoding), lm=lm, reference=ref.output_ids)
            runs[name].append(trace)
            found[name].append(explain(ref, trace))
    out = []
    v_seconds = sum(t.totals.seconds for t in vanilla)
    for name in drafters:
        divs, traces = found[name], runs[name]
        shared_ref = sum(d.reference_seconds for d in divs)
        shared_run = sum(d.run_seconds for d in divs)
        steps = sum(t.totals.steps for t in traces)
        out.append(DrafterCheck(
            name, len(divs), sum(d.verdict == IDENTICAL for d in divs), sum(d.verdict == NEAR_TIE for d in divs),
            sum(d.verdict == MISMATCH for d in divs),
            v_seconds / max(sum(t.totals.seconds for t in traces), 1e-12),
            shared_ref / shared_run if shared_run > 0 else None,
            tuple(d.short() for d in divs),
            sum(t.totals.new_tokens for t in traces) / steps if steps else 0.0))
    return tuple(out)


def run_doctor(model_id: str = "embedded", device: str = "auto", dtype: str = "auto",
               drafters: Sequence[str] | None = None, max_new_tokens: int = MAX_NEW_TOKENS,
               n_prompts: int = CHECK_PROMPTS, context_len: int | None = None,
               rows: Sequence[int] = ROWS, cpu_linear: bool | None = None,
               device_map: str | None = None, max_memory: str | None = None,
               offload_folder: str | None = None, retime: bool = False, compile: str = "auto") -> DoctorReport:
    """Load the model (cached) and measure; raises SpecvizError for a bad model, device,
    dtype or drafter name before measuring anything. `drafters`: None checks default_drafters()."""
    import torch
    import transformers

    from dataclasses import replace

    from ..core.timing import PeakMemory
    from ..drafters.kit.base import get
    from ..engine import service
    from ..errors import ConfigError
    from ..models import attention_label

    start = time.perf_counter()
    drafters = default_drafters() if drafters is None else tuple(drafters)
    for name in drafters:
        get(name)                                   # an unknown drafter fails now
    for name, value in (("max_new_tokens", max_new_tokens), ("prompts", n_prompts)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(name, f"must be a whole number of at least 1, got {value!r}")
    rows = tuple(rows)
    if not rows or any(isinstance(r, bool) or not isinstance(r, int) or r < 1 for r in rows) \
            or list(rows) != sorted(set(rows)):
        raise ConfigError("rows", f"must be rising whole numbers of at least 1, like {ROWS}, got {rows!r}")
    linear = {None: "auto", True: "on", False: "off"}[cpu_linear]
    target = RunRequest(model_id, device=device, dtype=dtype, cpu_linear=linear, device_map=device_map,
                        max_memory=max_memory, offload_folder=offload_folder, recorder=CHECK_RECORDER,
                        retime=retime, compile=compile)
    lm = service.load(target)
    requests = [replace(target, message=message, context=context) for _, context, message in check_prompts(n_prompts)]
    prompts = [service.prompt_of(r, lm) for r in requests]
    longest = lm.max_positions - max(rows)          # the widest forward must fit after the cache
    if context_len is not None and not 1 <= context_len <= longest:
        raise ConfigError("context_len", f"must be from 1 to {longest} for {lm.model_id} (its {lm.max_positions} "
                                         f"positions less the widest forward's {max(rows)} rows), got {context_len}")
    ctx = context_len if context_len is not None else max(1, min(len(prompts[0].ids), longest))
    curve = cost_curve(lm, ctx, rows)
    memory = PeakMemory(lm.device)
    checks = drafter_checks(lm, requests, drafters, max_new_tokens)
    notes = []
    if any(c.mismatches for c in checks):
        notes.append("a mismatch is a bug (a drafter, the tree mask, the KV cache or the acceptance): please report it")
    if any(c.near_ties for c in checks):
        notes.append(f"near-ties are rounding in {str(lm.dtype).replace('torch.', '')}, not bugs "
                     "(docs/gpu-and-precision.md)")
    from ..models.cost_cache import threading_env, threading_note
    if note := threading_note(threading_env()):          # a passive OpenMP wait slows CPU timings
        notes.append(note)
    return DoctorReport(
        model_id=lm.model_id, device=str(lm.device),
        gpu_name=torch.cuda.get_device_name(lm.device) if lm.device.type == "cuda" else None,
        dtype=str(lm.dtype).replace("torch.", ""), attention=attention_label(lm.model, lm.device),
        torch_version=torch.__version__, transformers_version=transformers.__version__,
        torch_threads=torch.get_num_threads(), cpu_linear=lm.cpu_linear,
        context_len=ctx, cost_curve=curve, max_new_tokens=max_new_tokens, checks=checks,
        peak_memory_mb=memory.peak_mb(), seconds=time.perf_counter() - start, notes=tuple(notes),
        device_map=dict(lm.device_map) or None, compile_step=lm.compile_step)


def format_report(r: DoctorReport) -> str:
    """The report as aligned plain-text tables (what `specviz doctor` prints)."""
    lines = [
        f"model        {r.model_id}",
        f"device       {r.device}" + (f" ({r.gpu_name})" if r.gpu_name else ""),
        f"dtype        {r.dtype}",
        f"attention    {r.attention}",
        f"torch        {r.torch_version} ({r.torch_threads} threads), transformers {r.transformers_version}",
        f"cpu_linear   {'on' if r.cpu_linear else 'off'}",
        f"compile      {r.compile_step}",
        *([f"device_map   {', '.join(f'{k or chr(39) * 2}={v}' for k, v in r.device_map.items())}"]
          if r.device_map else []),
        "",
        f"forward cost at {r.context_len} cached tokens (ms): measured now vs the cost model calibrated once per model",
        f"  {'rows':>5} {'measured':>9} {'model':>9} {'ratio':>6}",
    ]
    lines += [f"  {p.rows:>5} {p.measured_s * 1e3:>9.1f} {p.predicted_s * 1e3:>9.1f} {p.ratio:>6.2f}"
              for p in r.cost_curve]
    lines += [f"  {r.curve_reading}"] if r.curve_reading else []
    lines += ["", f"drafters vs vanilla ({len(r.checks[0].verdicts) if r.checks else 0} prompts, "
                  f"{r.max_new_tokens} new tokens, greedy, interleaved)",
              f"  {'drafter':<14} {'identical':>9} {'near-tie':>8} {'mismatch':>8} {'speedup':>7} "
              f"{'shared':>7} {'accepted':>8}"]
    for c in r.checks:
        lines.append(f"  {c.drafter:<14} {c.identical:>4}/{c.prompts:<4} {c.near_ties:>8} {c.mismatches:>8} "
                     f"{c.speedup:>6.2f}x {c.shared_text:>7} {c.mean_accepted:>8.2f}")
    if r.peak_memory_mb is not None:
        lines.append(f"peak GPU memory {r.peak_memory_mb:,.0f} MiB")
    lines.append(f"{'OK' if r.ok else 'MISMATCH'}: {r.seconds:.1f} s" + "".join(f"; {n}" for n in r.notes))
    return "\n".join(lines)
