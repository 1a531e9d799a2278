"""A serving engine's per-request speculative-decoding statistics, read as the planner's acceptance
(`specviz plan --stats FILE`): what each request's verify steps drafted and accepted, so the planner
can price a real server's acceptance instead of a specviz run's.

    stats = read_stats("responses.jsonl")        # vLLM, SGLang or llama.cpp responses, as saved
    profile = stats.profile("my-eagle3")           # a planner.LoadProfile (no timings: see below)

A file holds one response (a JSON object), a list of them, or one per line (JSON Lines), as a
client saves the server's answers. What is read, by engine (field names as the engines write them):

- vLLM (docs/features/speculative_decoding/acceptance_metrics.md; the server started with
  `--per-request-spec-decode-metrics summary` or `detailed`): a response's
  `metrics.speculative_decoding` (or that object alone): `per_step_drafted` / `per_step_accepted`
  (`detailed`: every step), else `acceptance_histogram_by_draft_length` ({k: [steps accepting j of k]}),
  else `acceptance_histogram` (steps accepting j) with `num_draft_tokens` / `num_spec_steps` draft
  tokens a step; `usage.completion_tokens` for the request's length. vLLM leaves out steps with no
  draft; so does this reader.
- SGLang (python/sglang/srt/managers/tokenizer_manager.py, `_calculate_spec_decoding_metrics`): a
  /generate response's `meta_info` (or that object alone): `spec_verify_ct` (verify steps) and
  `completion_tokens`, the histogram of steps by accepted draft tokens
  (`spec_correct_drafts_histogram`, or its older name `spec_accept_histogram`) and the proposed
  draft tokens (`spec_num_proposed_drafts`, or the older `spec_proposed_drafts` /
  `spec_draft_token_num`), which SGLang counts as spec_verify_ct x (speculative_num_draft_tokens - 1).
- llama.cpp's server (tools/server/server-task.cpp, `result_timings::to_json`): a response's
  `timings` with `predicted_n`, `draft_n` and `draft_n_accepted` (written only when draft_n > 0).
  It keeps no step count: every step commits its accepted drafts plus one token, so the steps are
  predicted_n - draft_n_accepted (the first token, from the prompt's forward, counted as one).

Where an engine gives only totals (llama.cpp; SGLang or vLLM without a histogram) the steps are
built from the means: tokens and draft sizes each spread over the two whole numbers around their
mean (the spread of a real run is lost, which the planner's padding term feels; `exact` says so).
A server's statistics carry no timings: the profile's drafting and other host costs are 0 unless
given (`draft_s`). A file of another shape ends in one StatsFormatError line naming what is wrong.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import SpecvizError
from ..files.jsonl import jsonl_records
from ..files.user_files import FileCheckError, loads_json, read_text_file
from .planner import LoadProfile, Step, StepDistribution

STATS_LIMIT_BYTES = 64 * 2**20
ENGINES = ("vllm", "sglang", "llama.cpp")
FLAG = "--stats"


class StatsFormatError(SpecvizError, ValueError):
    """A stats file that is not a vLLM, SGLang or llama.cpp per-request statistics file."""


@dataclass(frozen=True)
class RequestStats:
    """One request's verify steps: ((draft nodes, depth, tokens committed), steps) pairs."""
    steps: tuple[tuple[Step, float], ...]
    new_tokens: int
    exact: bool                        # the steps are the engine's own counts (False: built from means)


@dataclass(frozen=True)
class ServerStats:
    engine: str                        # one of ENGINES
    shape: str                         # which of the engine's fields were read
    source: str                        # the file
    requests: tuple[RequestStats, ...]

    @property
    def exact(self) -> bool:
        return all(r.exact for r in self.requests)

    def distribution(self) -> StepDistribution:
        pooled: dict[Step, float] = {}
        for r in self.requests:
            for step, w in r.steps:
                pooled[step] = pooled.get(step, 0.0) + w
        return StepDistribution(tuple(sorted(pooled.items())))

    def profile(self, label: str | None = None, draft_s: float = 0.0, overhead_s: float = 0.0) -> LoadProfile:
        """The requests' steps pooled as a planner profile; no timings but those given."""
        counts: dict[int, float] = {}
        for r in self.requests:
            counts[r.new_tokens] = counts.get(r.new_tokens, 0.0) + 1.0
        note = (f"{self.engine} statistics ({self.shape}): "
                + ("the steps as the server counted them" if self.exact else
                   "steps rebuilt from per-request means (the server kept no histogram)")
                + "; the server's drafting and host costs are not in them"
                + (f" (drafting priced at {draft_s * 1000:.2f} ms a step, as given)" if draft_s else " (priced at 0)"))
        return LoadProfile(label or f"{self.engine} stats", self.distribution(), draft_s, overhead_s, 0.0,
                           tuple(sorted(counts.items())), None, f"{self.engine} per-request statistics ({self.source})",
                           "", notes=(note,), sizes_known=self.exact)

    def summary_line(self) -> str:
        dist = self.distribution()
        return (f"{self.source}: {self.engine} ({self.shape}), {len(self.requests)} requests, "
                f"{sum(w for r in self.requests for _, w in r.steps):.0f} verify steps, "
                f"mean acceptance length {dist.mean_tokens:.2f} (bonus counted), "
                f"{dist.mean_nodes:.2f} draft tokens a step")


# --- reading ----------------------------------------------------------------------------------

def read_stats(path: str | Path, label: str | None = None) -> ServerStats:
    """A stats file (see the module doc); StatsFormatError `--stats: FILE: ...` otherwise."""
    file = Path(path)
    where = f"{FLAG}: {file.name}"
    try:
        text = read_text_file(str(file), where, STATS_LIMIT_BYTES, StatsFormatError)
    except FileCheckError as err:
        raise StatsFormatError(str(err)) from None
    return parse_stats(text, where, str(file))


def parse_stats(text: str, where: str, source: str = "") -> ServerStats:
    records = _records(text, where)
    if not records:
        raise StatsFormatError(f"{where}: holds no responses (expected a JSON object, a list of them, "
                               "or one per line)")
    engine = None
    shapes: list[str] = []
    requests: list[RequestStats] = []
    for i, record in enumerate(records, start=1):
        at = f"{where}: response {i}" if len(records) > 1 else where
        mine = _engine_of(record)
        if mine is None:
            raise StatsFormatError(
                f"{at}: not a per-request statistics object of vLLM (metrics.speculative_decoding), SGLang "
                f"(meta_info.spec_verify_ct) or llama.cpp (timings.draft_n); {_keys(record)}")
        if engine is not None and mine != engine:
            raise StatsFormatError(f"{at}: a {mine} response in a file of {engine} responses; give one engine's")
        engine = mine
        request, shape = READERS[mine](record, at)
        requests.append(request)
        shapes.append(shape)
    assert engine is not None
    return ServerStats(engine, ", ".join(dict.fromkeys(shapes)), source or where, tuple(requests))


def _records(text: str, where: str) -> list[Any]:
    try:
        data = loads_json(text, where, error=StatsFormatError, hint="give the responses as the server wrote them")
    except StatsFormatError as whole:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            raise whole from None

        def bad(number: int, why: str) -> Exception:
            return StatsFormatError(f"{where}: line {number} is not JSON ({why})")
        return [record for _, record in jsonl_records(text, bad)]
    return data if isinstance(data, list) else [data]


def _keys(record: Any) -> str:
    if not isinstance(record, dict):
        return f"it is a JSON {type(record).__name__}, not an object"
    shown = ", ".join(sorted(map(str, record))[:8])
    return f"its keys are {shown}" if shown else "it is an empty object"


def _engine_of(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    metrics = record.get("metrics")
    if (isinstance(metrics, dict) and "speculative_decoding" in metrics) or "num_spec_steps" in record:
        return "vllm"
    meta = record.get("meta_info")
    if (isinstance(meta, dict) and "spec_verify_ct" in meta) or "spec_verify_ct" in record:
        return "sglang"
    timings = record.get("timings")
    if isinstance(timings, dict) and ("draft_n" in timings or "predicted_n" in timings):
        return "llama.cpp"
    return None


def _count(value: Any, name: str, at: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise StatsFormatError(f"{at}: {name} must be a whole number >= 0, got {value!r}")
    return int(value)


def _counts(value: Any, name: str, at: str) -> list[int]:
    if not isinstance(value, list):
        raise StatsFormatError(f"{at}: {name} must be a list of step counts, got {type(value).__name__}")
    return [_count(v, f"{name}[{i}]", at) for i, v in enumerate(value)]


def _spread(mean: float) -> list[tuple[int, float]]:
    """A mean as weights on the two whole numbers around it (its mean kept)."""
    lo = int(math.floor(mean))
    frac = mean - lo
    return [(v, w) for v, w in ((lo, 1.0 - frac), (lo + 1, frac)) if w > 1e-12]


def _chain(drafted: int, accepted: int) -> Step:
    return (drafted, drafted, accepted + 1)


def _from_means(steps: float, tokens_per_step: float, nodes_per_step: float, depth: int | None) -> list[tuple[Step, float]]:
    """`steps` steps with these means, tokens and sizes independent (a step's nodes >= its accepted)."""
    out: dict[Step, float] = {}
    for a, wa in _spread(max(tokens_per_step, 1.0)):
        for n, wn in _spread(max(nodes_per_step, 0.0)):
            n = max(n, a - 1)
            d = n if depth is None else max(min(n, depth), a - 1)
            out[(n, d, a)] = out.get((n, d, a), 0.0) + steps * wa * wn
    return sorted(out.items())


# --- vLLM -----------------------------------------------------------------------------------------

def _vllm(record: Mapping[str, Any], at: str) -> tuple[RequestStats, str]:
    metrics = record.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else record
    if spec is None:
        raise StatsFormatError(f"{at}: metrics.speculative_decoding is null (vLLM fills it only when started with "
                               "--per-request-spec-decode-metrics summary or detailed, with speculative decoding on, "
                               "for a request with n == 1)")
    if not isinstance(spec, dict):
        raise StatsFormatError(f"{at}: metrics.speculative_decoding must be an object")
    usage = record.get("usage")
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    steps: dict[Step, float] = {}
    if "per_step_drafted" in spec or "per_step_accepted" in spec:
        drafted = _counts(spec.get("per_step_drafted"), "per_step_drafted", at)
        accepted = _counts(spec.get("per_step_accepted"), "per_step_accepted", at)
        if len(drafted) != len(accepted):
            raise StatsFormatError(f"{at}: per_step_drafted has {len(drafted)} steps and per_step_accepted "
                                   f"{len(accepted)}; they must pair up")
        for i, (k, j) in enumerate(zip(drafted, accepted)):
            if j > k:
                raise StatsFormatError(f"{at}: step {i} accepted {j} of {k} drafted tokens")
            steps[_chain(k, j)] = steps.get(_chain(k, j), 0.0) + 1
        shape = "per_step_drafted/per_step_accepted"
    elif "acceptance_histogram_by_draft_length" in spec:
        table = spec["acceptance_histogram_by_draft_length"]
        if not isinstance(table, dict):
            raise StatsFormatError(f"{at}: acceptance_histogram_by_draft_length must be an object {{k: [counts]}}")
        for key, counts in table.items():
            if not str(key).isdigit():
                raise StatsFormatError(f"{at}: acceptance_histogram_by_draft_length has the key {key!r}, not a draft length")
            k = int(key)
            row = _counts(counts, f"acceptance_histogram_by_draft_length[{key}]", at)
            if len(row) != k + 1:
                raise StatsFormatError(f"{at}: acceptance_histogram_by_draft_length[{key}] has {len(row)} buckets; "
                                       f"a draft of {k} has {k + 1} (0..{k} accepted)")
            for j, c in enumerate(row):
                if c:
                    steps[_chain(k, j)] = steps.get(_chain(k, j), 0.0) + c
        shape = "acceptance_histogram_by_draft_length"
    elif "acceptance_histogram" in spec:
        hist = _counts(spec["acceptance_histogram"], "acceptance_histogram", at)
        n_steps = sum(hist)
        drafts = _count(spec.get("num_draft_tokens", (len(hist) - 1) * n_steps), "num_draft_tokens", at)
        nodes = drafts / n_steps if n_steps else 0.0
        for j, c in enumerate(hist):
            for n, w in _spread(nodes):
                n = max(n, j)
                steps[_chain(n, j)] = steps.get(_chain(n, j), 0.0) + c * w
        shape = "acceptance_histogram"
    else:
        raise StatsFormatError(f"{at}: metrics.speculative_decoding has no acceptance_histogram (nor "
                               "acceptance_histogram_by_draft_length, per_step_drafted): not vLLM's per-request shape")
    if "num_spec_steps" in spec:
        declared = _count(spec["num_spec_steps"], "num_spec_steps", at)
        if abs(declared - sum(steps.values())) > 1e-6:
            raise StatsFormatError(f"{at}: num_spec_steps is {declared} but the histogram holds "
                                   f"{sum(steps.values()):.0f} steps")
    if not steps:
        raise StatsFormatError(f"{at}: no verify step with a draft (an all-zero histogram): nothing to plan from")
    new = (_count(completion, "usage.completion_tokens", at) if completion is not None
           else int(round(sum(a * w for (_, _, a), w in steps.items()))))
    return RequestStats(tuple(sorted(steps.items())), new, True), shape


# --- SGLang ---------------------------------------------------------------------------------------

def _sglang(record: Mapping[str, Any], at: str) -> tuple[RequestStats, str]:
    meta = record.get("meta_info", record)
    if not isinstance(meta, dict):
        raise StatsFormatError(f"{at}: meta_info must be an object")
    for need in ("spec_verify_ct", "completion_tokens"):
        if need not in meta:
            raise StatsFormatError(f"{at}: meta_info has no {need} (SGLang writes both for a finished request)")
    verify = _count(meta["spec_verify_ct"], "spec_verify_ct", at)
    completion = _count(meta["completion_tokens"], "completion_tokens", at)
    if verify == 0:
        raise StatsFormatError(f"{at}: spec_verify_ct is 0: the server verified no draft for this request")
    proposed_key = next((k for k in ("spec_num_proposed_drafts", "spec_proposed_drafts", "spec_draft_token_num")
                         if k in meta), None)
    hist_key = next((k for k in ("spec_correct_drafts_histogram", "spec_accept_histogram") if k in meta), None)
    nodes = _count(meta[proposed_key], proposed_key, at) / verify if proposed_key else None
    if hist_key is not None:
        hist = _counts(meta[hist_key], hist_key, at)
        if sum(hist) != verify:
            raise StatsFormatError(f"{at}: {hist_key} holds {sum(hist)} steps but spec_verify_ct is {verify}")
        deepest = len(hist) - 1
        steps: dict[Step, float] = {}
        for j, c in enumerate(hist):
            for n, w in _spread(nodes if nodes is not None else deepest):
                n = max(n, j)
                step = (n, min(n, max(deepest, j)), j + 1)
                steps[step] = steps.get(step, 0.0) + c * w
        return RequestStats(tuple(sorted(steps.items())), completion, True), hist_key
    if nodes is None:
        raise StatsFormatError(f"{at}: meta_info has neither a histogram (spec_correct_drafts_histogram) nor the "
                               "proposed draft tokens (spec_num_proposed_drafts): the draft size is unknown")
    return RequestStats(tuple(_from_means(verify, completion / verify, nodes, None)), completion, False), \
        f"spec_verify_ct + {proposed_key}"


# --- llama.cpp ------------------------------------------------------------------------------------

def _llama_cpp(record: Mapping[str, Any], at: str) -> tuple[RequestStats, str]:
    timings = record["timings"]
    if "draft_n" not in timings:
        raise StatsFormatError(f"{at}: timings has no draft_n: the server drafted nothing for this request "
                               "(llama.cpp writes draft_n and draft_n_accepted only when it drafted; start it with "
                               "a draft model, -md, or --spec-type)")
    if "draft_n_accepted" not in timings or "predicted_n" not in timings:
        raise StatsFormatError(f"{at}: timings has draft_n but not "
                               + " and ".join(k for k in ("draft_n_accepted", "predicted_n") if k not in timings))
    drafted = _count(timings["draft_n"], "draft_n", at)
    accepted = _count(timings["draft_n_accepted"], "draft_n_accepted", at)
    predicted = _count(timings["predicted_n"], "predicted_n", at)
    if accepted > drafted or accepted >= predicted:
        raise StatsFormatError(f"{at}: draft_n_accepted {accepted} must be at most draft_n {drafted} and below "
                               f"predicted_n {predicted}")
    steps = predicted - accepted
    return (RequestStats(tuple(_from_means(steps, predicted / steps, drafted / steps, None)), predicted, False),
            "timings.draft_n/draft_n_accepted")


READERS = {"vllm": _vllm, "sglang": _sglang, "llama.cpp": _llama_cpp}
