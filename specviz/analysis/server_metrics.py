"""A user's own vLLM or SGLang server's speculative-decoding figures, read in; and the same
figures from a specviz run (a Trace), for drawing one beside the other (viz/server_metrics.py).

    metrics = read_source("metrics.txt" | "http://host:8000/metrics" | "stats.json")
    ours = trace_spec_metrics(trace)            # the same numbers from a specviz Trace

What is read (names as the engines expose them; a Prometheus counter `x` is exposed as `x_total`
and both spellings are accepted; label sets other than `position`, e.g. one per engine or
model, are summed for counters and averaged for gauges):
- vLLM V1 (vllm/v1/spec_decode/metrics.py, SpecDecodingProm): the counters
  `vllm:spec_decode_num_drafts`, `vllm:spec_decode_num_draft_tokens`,
  `vllm:spec_decode_num_accepted_tokens` and `vllm:spec_decode_num_accepted_tokens_per_pos`
  with a `position` label (0-based).
- vLLM V0 (vllm/engine/metrics.py): `vllm:spec_decode_num_draft_tokens_total`,
  `..._num_accepted_tokens_total`, `..._num_emitted_tokens_total` (counters),
  `vllm:spec_decode_draft_acceptance_rate` and `vllm:spec_decode_efficiency` (gauges). V0 had
  no draft count; with a fixed k = num_speculative_tokens the drafts are draft_tokens / k,
  given as `spec_tokens` (a V0 dump does not say k).
- SGLang (python/sglang/srt/metrics/collector.py): the gauges `sglang:spec_accept_length`
  (accepted tokens per verify, the bonus token counted) and `sglang:spec_accept_rate`.
- vLLM's speculative-decoding stats as JSON (one object, a list, or JSON lines, summed), in
  both shapes vLLM has used: V0's SpecDecodeWorkerMetrics (vllm/spec_decode/metrics.py:
  draft_acceptance_rate, system_efficiency, draft_tokens, emitted_tokens, accepted_tokens,
  num_spec_tokens) and V1's SpecDecodingStats (num_spec_tokens, num_drafts,
  num_draft_tokens, num_accepted_tokens, num_accepted_tokens_per_pos).

Acceptance length counts the bonus token, as vLLM and SGLang do: 1 + accepted / drafts. The
per-position rate at k is the share of drafts whose first k+1 tokens were all accepted
(vLLM's num_accepted_tokens_per_pos[k] / num_drafts). A foreign dump (no such metric), a
malformed line or a truncated one (a per-position series with a gap, a counter set without
its partner) ends in a MetricsImportError naming what is wrong.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ..errors import SpecvizError
from ..files.fetch import UrlPolicy, fetch
from ..files.user_files import loads_json, read_text_file
from ..files.user_values import ascii_int, finite_number, shown, whole_number

if TYPE_CHECKING:
    from ..core.trace import Trace

URL_TIMEOUT_S = 10.0
MAX_BYTES = 32 * 2**20            # a /metrics page is kilobytes; refuse anything absurd
MAX_LINE = 64 * 1024              # a sample line is under 1 KB (a few labels); its regexes never see more
MAX_POSITIONS = 1024              # draft positions: no engine drafts more tokens per step
MAX_ACCEPT_LENGTH = MAX_POSITIONS + 1

VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
VLLM_EMITTED = "vllm:spec_decode_num_emitted_tokens"               # V0 only
VLLM_V0_RATE = "vllm:spec_decode_draft_acceptance_rate"             # V0 gauge
VLLM_V0_EFFICIENCY = "vllm:spec_decode_efficiency"                  # V0 gauge
SGLANG_LENGTH = "sglang:spec_accept_length"
SGLANG_RATE = "sglang:spec_accept_rate"
KNOWN = (VLLM_DRAFTS, VLLM_DRAFT_TOKENS, VLLM_ACCEPTED, VLLM_PER_POS, VLLM_EMITTED, VLLM_V0_RATE,
         VLLM_V0_EFFICIENCY, SGLANG_LENGTH, SGLANG_RATE)

V0_STATS_KEYS = frozenset({"draft_acceptance_rate", "system_efficiency", "draft_tokens", "emitted_tokens",
                           "accepted_tokens", "num_spec_tokens"})
V1_STATS_KEYS = frozenset({"num_spec_tokens", "num_drafts", "num_draft_tokens", "num_accepted_tokens",
                           "num_accepted_tokens_per_pos"})


class MetricsImportError(SpecvizError, ValueError):
    """A metrics dump or URL that cannot be read as a vLLM / SGLang speculative-decoding report."""


@dataclass(frozen=True)
class SpecMetrics:
    """One source's speculative-decoding figures; None where the source does not say."""
    engine: str                                  # "vllm", "sglang" or "specviz"
    shape: str                                   # which format it came in (see the module doc)
    source: str                                  # the file, URL or trace it came from
    acceptance_length: float | None              # 1 + accepted / drafts (the bonus counted)
    acceptance_rate: float | None                # accepted draft tokens / draft tokens
    per_position: tuple[float, ...] = ()         # P(first k+1 draft tokens all accepted), k = 0..
    num_drafts: float | None = None
    num_draft_tokens: float | None = None
    num_accepted_tokens: float | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "shape": self.shape, "source": self.source,
                "acceptance_length": self.acceptance_length, "acceptance_rate": self.acceptance_rate,
                "per_position": list(self.per_position), "num_drafts": self.num_drafts,
                "num_draft_tokens": self.num_draft_tokens, "num_accepted_tokens": self.num_accepted_tokens,
                "notes": list(self.notes)}


# --- the Prometheus text format -------------------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})(\{{(.*)\}})?\s+(\S+)(\s+-?[0-9]+)?\s*$")
# a label value as an unrolled loop with possessive quantifiers (Python 3.11): no backtracking point
# is kept per character or per escape, so any length costs the same memory (the alternation under a
# star it replaces kept one per character: 3.7 GB for a 20 MB label)
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*+(?:\\.[^"\\]*+)*+)"\s*(,|$)')


def parse_prometheus(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (version 0.0.4 / OpenMetrics-compatible lines).
    MetricsImportError names the first line that is not a comment, blank or sample."""
    samples = []
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_LINE:
            raise MetricsImportError(f"metrics: line {number} is {len(line):,} characters long; a Prometheus sample "
                                     f"line is under {MAX_LINE // 1024} KB (an unclosed label or quote?)")
        match = _SAMPLE.match(line)
        value = _number(match.group(4)) if match else None
        labels = _labels(match.group(3) or "") if match else None
        if match is not None and labels is not None and value is None:
            raise MetricsImportError(f"metrics: line {number}: the value {shown(match.group(4), 40)} is not a number "
                                     "(a count or rate in decimal or exponent form, at most 64 characters)")
        if match is None or value is None or labels is None:
            cut = number == len(lines) and not text.endswith("\n")
            raise MetricsImportError(
                f"metrics: line {number} is not a Prometheus sample ({line[:80]!r})"
                + ("; the dump looks truncated (its last line is cut)" if cut else ""))
        samples.append(Sample(match.group(1), labels, value))
    return samples


def _number(text: str) -> float | None:
    if len(text) > 64:                # a float has at most 17 significant digits; 400 digits is no count
        return None
    try:
        return float(text)            # also +Inf, -Inf, NaN, as the format allows
    except ValueError:
        return None


def _labels(text: str) -> tuple[tuple[str, str], ...] | None:
    out, pos = [], 0
    text = text.strip().rstrip(",")
    while pos < len(text):
        match = _LABEL.match(text, pos)
        if not match:
            return None
        value = match.group(2).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
        out.append((match.group(1), value))
        pos = match.end()
    return tuple(out)


def _base(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def from_prometheus(text: str, source: str = "", spec_tokens: int | None = None) -> SpecMetrics:
    """vLLM's or SGLang's figures from a Prometheus text dump (see the module doc)."""
    samples = [s for s in parse_prometheus(text) if not s.name.endswith("_created")]
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for s in samples:                  # an exposition holds each series once; twice is a pasted dump
        series = (s.name, tuple(sorted(s.labels)))
        if series in seen:
            raise MetricsImportError(f"metrics: {s.name}{{{','.join(f'{k}={v!r}' for k, v in s.labels)}}} appears "
                                     "twice; a /metrics page lists each series once: import one scrape at a time")
        seen.add(series)
    by: dict[str, list[Sample]] = {}
    for s in samples:
        base = _base(s.name)
        if base in KNOWN:
            by.setdefault(base, []).append(s)
    if not by:
        names = sorted({_base(s.name) for s in samples})
        raise MetricsImportError(
            f"metrics: {source or 'the dump'} has no vLLM or SGLang speculative-decoding metric "
            f"(looked for {VLLM_DRAFTS}, {VLLM_ACCEPTED}, {SGLANG_LENGTH}...; found "
            f"{len(names)} other metric{'s' if len(names) != 1 else ''}"
            + (f", e.g. {names[0]}" if names else "") + "); is speculative decoding on, and is this its /metrics?")
    if any(k.startswith("vllm:") for k in by) and any(k.startswith("sglang:") for k in by):
        raise MetricsImportError("metrics: the dump mixes vLLM and SGLang metrics; import one server's at a time")
    bad = next((s for group in by.values() for s in group if not (math.isfinite(s.value) and s.value >= 0)), None)
    if bad is not None:            # the format allows NaN and +-Inf; a count or a rate never is one
        raise MetricsImportError(f"metrics: {bad.name} is {bad.value:g}; a speculative-decoding count or rate "
                                 "is a finite number >= 0")
    if SGLANG_LENGTH in by or SGLANG_RATE in by:
        return _sglang(by, source)
    return _vllm(by, source, spec_tokens)


def _sum(samples: Sequence[Sample]) -> float:
    return float(sum(s.value for s in samples))


def _mean(samples: Sequence[Sample]) -> float:
    return float(sum(s.value for s in samples) / len(samples))


def _sglang(by: Mapping[str, list[Sample]], source: str) -> SpecMetrics:
    length = _mean(by[SGLANG_LENGTH]) if SGLANG_LENGTH in by else None
    rate = _mean(by[SGLANG_RATE]) if SGLANG_RATE in by else None
    notes = []
    if max(len(by.get(SGLANG_LENGTH, ())), len(by.get(SGLANG_RATE, ()))) > 1:
        notes.append("several label sets (ranks or models): their gauges are averaged")
    notes.append("SGLang exposes gauges of recent batches, not counters: no per-position rates")
    return SpecMetrics("sglang", "sglang-prometheus", source, length, rate, notes=tuple(notes))


def _vllm(by: Mapping[str, list[Sample]], source: str, spec_tokens: int | None) -> SpecMetrics:
    drafts = _sum(by[VLLM_DRAFTS]) if VLLM_DRAFTS in by else None
    draft_tokens = _sum(by[VLLM_DRAFT_TOKENS]) if VLLM_DRAFT_TOKENS in by else None
    accepted = _sum(by[VLLM_ACCEPTED]) if VLLM_ACCEPTED in by else None
    if drafts is not None:                                      # V1
        if accepted is None:
            raise MetricsImportError(f"metrics: {VLLM_DRAFTS} without {VLLM_ACCEPTED}: the dump looks truncated")
        per_pos = _per_position(by.get(VLLM_PER_POS, []), drafts)
        length = 1 + accepted / drafts if drafts else None
        rate = accepted / draft_tokens if draft_tokens else None
        notes = (f"k = {spec_tokens} (--spec-tokens) is not used: vLLM V1 counts its drafts",) if spec_tokens else ()
        return SpecMetrics("vllm", "vllm-v1-prometheus", source, length, rate, per_pos, drafts, draft_tokens,
                           accepted, notes)
    if VLLM_PER_POS in by:
        raise MetricsImportError(f"metrics: {VLLM_PER_POS} without {VLLM_DRAFTS}: the dump looks truncated")
    # V0: counters of draft / accepted / emitted tokens and two gauges; no draft count
    emitted = _sum(by[VLLM_EMITTED]) if VLLM_EMITTED in by else None
    if draft_tokens is None or accepted is None:
        if VLLM_V0_RATE in by:
            return SpecMetrics("vllm", "vllm-v0-prometheus", source, None, _mean(by[VLLM_V0_RATE]),
                               notes=("only the acceptance-rate gauge: no token counters",))
        raise MetricsImportError(f"metrics: {VLLM_DRAFT_TOKENS} and {VLLM_ACCEPTED} must both be there "
                                 "(one is missing): the dump looks truncated")
    return _v0(source, "vllm-v0-prometheus", draft_tokens, accepted, emitted, spec_tokens)


def _v0(source: str, shape: str, draft_tokens: float, accepted: float, emitted: float | None,
        spec_tokens: int | None) -> SpecMetrics:
    rate = accepted / draft_tokens if draft_tokens else None
    if not spec_tokens:
        return SpecMetrics("vllm", shape, source, None, rate, (), None, draft_tokens, accepted,
                           ("vLLM V0 counts no drafts: give the server's num_speculative_tokens "
                            "(--spec-tokens K) for the acceptance length",))
    drafts = draft_tokens / spec_tokens
    # emitted = accepted + one bonus (or correction) token per draft; prefer it where present
    length = (emitted / drafts if emitted is not None else 1 + accepted / drafts) if drafts else None
    return SpecMetrics("vllm", shape, source, length, rate, (), drafts, draft_tokens, accepted,
                       (f"drafts = draft tokens / k = {spec_tokens} (V0 drafted k tokens per step)",))


def _per_position(samples: Sequence[Sample], drafts: float) -> tuple[float, ...]:
    counts: dict[int, float] = {}
    for s in samples:
        label = dict(s.labels).get("position")
        pos = ascii_int(label, max_digits=len(str(MAX_POSITIONS)))
        if pos is None or pos >= MAX_POSITIONS:
            raise MetricsImportError(f"metrics: {VLLM_PER_POS} sample with position {str(label)[:20]!r}; a position "
                                     f"is a whole number from 0 to {MAX_POSITIONS - 1} in ASCII digits")
        counts[pos] = counts.get(pos, 0.0) + s.value
    if not counts:
        return ()
    if max(counts) >= len(counts):           # a gap: found among the positions given, never by range(max)
        gap = next(k for k, pos in enumerate(sorted(counts)) if pos != k)
        raise MetricsImportError(f"metrics: {VLLM_PER_POS} has no position {gap} (positions "
                                 f"0..{max(counts)} expected): the dump looks truncated")
    return tuple(counts[k] / drafts if drafts else 0.0 for k in range(len(counts)))


# --- vLLM's stats objects as JSON -----------------------------------------------------------------

def from_stats_json(text: str, source: str = "") -> SpecMetrics:
    """vLLM's per-request / per-step speculative-decoding stats (V0 SpecDecodeWorkerMetrics or V1
    SpecDecodingStats) as one JSON object, a list of them or JSON lines; several are summed."""
    what, hint = f"metrics: {source or 'the stats'}", "the file looks truncated or is not vLLM stats"
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        data = loads_json(text, what, error=MetricsImportError, hint=hint)
        records = data if isinstance(data, list) else [data]
    except MetricsImportError:
        if len(lines) < 2:                   # not JSON lines either: the whole text's reason
            raise
        records = [loads_json(line, f"{what} line {n}", error=MetricsImportError, hint=hint)
                   for n, line in enumerate(lines, 1)]
    if not records:
        raise MetricsImportError(f"{what}: an empty list; expected vLLM speculative-decoding stats")
    bad = next((i for i, r in enumerate(records) if not isinstance(r, dict)), None)
    if bad is not None:
        raise MetricsImportError(f"{what}: record {bad} is a {type(records[bad]).__name__}, not a JSON object of "
                                 "vLLM speculative-decoding stats")
    keys = set(records[0])
    if "num_drafts" in keys:
        return _v1_stats(records, source)
    if keys & {"draft_tokens", "emitted_tokens", "accepted_tokens"}:
        return _v0_stats(records, source)
    raise MetricsImportError(
        f"metrics: the JSON has none of vLLM's speculative-decoding stats fields (V1: "
        f"{', '.join(sorted(V1_STATS_KEYS))}; V0: {', '.join(sorted(V0_STATS_KEYS))}); found "
        f"{', '.join(sorted(keys)[:6]) or 'no fields'}")


def _field(record: Mapping[str, Any], name: str, i: int) -> float:
    value = record.get(name)
    number = finite_number(value)
    if number is None or number < 0:
        raise MetricsImportError(f"metrics: record {i}: {name} must be a non-negative number, got {shown(value, 40)}")
    return number


def _sums(records: Sequence[Mapping[str, Any]], *names: str) -> tuple[float, ...]:
    """Each named field summed over the records (each must be a non-negative number)."""
    return tuple(sum(_field(r, name, i) for i, r in enumerate(records)) for name in names)


def _v1_stats(records: Sequence[Mapping[str, Any]], source: str) -> SpecMetrics:
    drafts, tokens, accepted = _sums(records, "num_drafts", "num_draft_tokens", "num_accepted_tokens")
    for i, r in enumerate(records):
        if "num_spec_tokens" in r and whole_number(r["num_spec_tokens"], 1, MAX_POSITIONS) is None:
            raise MetricsImportError(f"metrics: record {i}: num_spec_tokens must be a whole number from 1 to "
                                     f"{MAX_POSITIONS}, got {str(r['num_spec_tokens'])[:30]}")
    per_pos: list[float] = []
    for i, r in enumerate(records):
        pos = r.get("num_accepted_tokens_per_pos", [])
        if not isinstance(pos, list) or len(pos) > MAX_POSITIONS:
            raise MetricsImportError(f"metrics: record {i}: num_accepted_tokens_per_pos must be a list of at most "
                                     f"{MAX_POSITIONS} counts")
        per_pos += [0.0] * (len(pos) - len(per_pos))
        for k, v in enumerate(pos):
            per_pos[k] += _field({f"num_accepted_tokens_per_pos[{k}]": v}, f"num_accepted_tokens_per_pos[{k}]", i)
    return SpecMetrics("vllm", "vllm-v1-stats", source, 1 + accepted / drafts if drafts else None,
                       accepted / tokens if tokens else None,
                       tuple(p / drafts for p in per_pos) if drafts else (), drafts, tokens, accepted)


def _v0_stats(records: Sequence[Mapping[str, Any]], source: str) -> SpecMetrics:
    tokens, accepted, emitted = _sums(records, "draft_tokens", "accepted_tokens", "emitted_tokens")
    ks = set()
    for i, r in enumerate(records):
        if "num_spec_tokens" in r:
            k = whole_number(r["num_spec_tokens"], 1, MAX_POSITIONS)
            if k is None:
                raise MetricsImportError(f"metrics: record {i}: num_spec_tokens must be a whole number from 1 to "
                                         f"{MAX_POSITIONS}, got {str(r['num_spec_tokens'])[:30]}")
            ks.add(k)
    if len(ks) > 1:
        raise MetricsImportError(f"metrics: records with different num_spec_tokens ({sorted(ks)}) cannot be summed")
    return _v0(source, "vllm-v0-stats", tokens, accepted, emitted, ks.pop() if ks else None)


# --- reading a source -----------------------------------------------------------------------------

def fetch_url(url: str, timeout: float = URL_TIMEOUT_S, hosts: tuple[str, ...] | None = None) -> str:
    """The body of an http(s) URL (a server's /metrics) through the one URL fetcher
    (files/fetch.py): `timeout` seconds for the whole fetch, MAX_BYTES at most, redirects checked
    hop by hop; `hosts` (None: any, the command line's) the hosts a web page may read."""
    body = fetch(url, UrlPolicy(hosts=hosts, deadline_s=timeout, max_bytes=MAX_BYTES), "metrics",
                 error=MetricsImportError)
    return body.decode("utf-8", errors="replace")


def parse_text(text: str, source: str = "", spec_tokens: int | None = None) -> SpecMetrics:
    """A dump's text, as Prometheus or as vLLM's stats JSON (told apart by its first character)."""
    if not text.strip():
        raise MetricsImportError(f"metrics: {source or 'the dump'} is empty")
    if text.lstrip()[:1] in "{[":
        return consistent(from_stats_json(text, source))
    return consistent(from_prometheus(text, source, spec_tokens))


def consistent(m: SpecMetrics) -> SpecMetrics:
    """`m`, unless its figures contradict each other (more tokens accepted than drafted, more
    drafts than draft tokens, a rate outside [0, 1], a per-position curve that rises, a mean
    acceptance length below 1 or above the longest draft + 1): a dump pieced together from
    several servers or restarts, or edited, whose figures would mean nothing. Per-position counts
    that do not sum to the accepted counter (a scrape may land between two updates) are a note."""
    what = m.source or "the dump"
    if m.num_accepted_tokens is not None and m.num_draft_tokens is not None \
            and m.num_accepted_tokens > m.num_draft_tokens:
        raise MetricsImportError(f"metrics: {what} counts more accepted tokens ({m.num_accepted_tokens:g}) than "
                                 f"draft tokens ({m.num_draft_tokens:g}); its counters do not belong together")
    if m.acceptance_rate is not None and not 0 <= m.acceptance_rate <= 1:
        raise MetricsImportError(f"metrics: {what} gives an acceptance rate of {m.acceptance_rate:g}; a rate is "
                                 "between 0 and 1")
    if m.acceptance_length is not None and 0 < m.acceptance_length < 1:   # 0: a gauge before any batch
        raise MetricsImportError(f"metrics: {what} gives a mean acceptance length of {m.acceptance_length:g}; "
                                 "with the bonus token it is at least 1")
    rates = m.per_position
    if rates and not (0 <= min(rates) and max(rates) <= 1 + 1e-9):
        raise MetricsImportError(f"metrics: {what} gives a per-position acceptance rate of {max(rates):.4g}; a "
                                 "rate is between 0 and 1 (accepted at the position / drafts)")
    if m.num_drafts is not None and m.num_draft_tokens is not None and m.num_draft_tokens:
        if m.num_drafts > m.num_draft_tokens:
            raise MetricsImportError(f"metrics: {what} counts more drafts ({m.num_drafts:g}) than draft tokens "
                                     f"({m.num_draft_tokens:g}); a draft holds at least one token")
        if m.num_drafts < 1:
            raise MetricsImportError(f"metrics: {what} gives {m.num_drafts:g} drafts for {m.num_draft_tokens:g} "
                                     "draft tokens; is k (--spec-tokens) the server's num_speculative_tokens?")
        longest = len(m.per_position) or m.num_draft_tokens / m.num_drafts
        if m.acceptance_length is not None and m.acceptance_length > longest + 1 + 1e-9:
            raise MetricsImportError(f"metrics: {what} gives a mean acceptance length of {m.acceptance_length:.4g}, "
                                     f"more than a draft of {longest:g} tokens and the bonus token can make")
    if m.acceptance_length is not None and m.acceptance_length > MAX_ACCEPT_LENGTH:
        raise MetricsImportError(f"metrics: {what} gives a mean acceptance length of {m.acceptance_length:.4g}; "
                                 f"no engine drafts more than {MAX_POSITIONS} tokens a step, so it is at most "
                                 f"{MAX_ACCEPT_LENGTH}")
    rise = next((k for k in range(1, len(rates)) if rates[k] > rates[k - 1] + 1e-9), None)
    if rise is not None:
        raise MetricsImportError(f"metrics: {what} accepts more drafts at position {rise} ({rates[rise]:.3f}) than "
                                 f"at position {rise - 1} ({rates[rise - 1]:.3f}); a position is only reached "
                                 "through the ones before it, so its counts do not belong together")
    if rates and m.num_drafts and m.num_accepted_tokens is not None:
        by_position = sum(rates) * m.num_drafts
        if abs(by_position - m.num_accepted_tokens) > max(1.0, 0.01 * m.num_accepted_tokens):
            note = (f"the per-position counts sum to {by_position:.0f} accepted tokens, the accepted counter "
                    f"says {m.num_accepted_tokens:.0f} (a scrape taken mid-update, or counters of different runs)")
            return replace(m, notes=m.notes + (note,))
    return m


def read_source(source: str, spec_tokens: int | None = None, timeout: float = URL_TIMEOUT_S,
                hosts: tuple[str, ...] | None = None) -> SpecMetrics:
    """A file path or an http(s) URL, read and parsed (parse_text). `hosts`: a web page's
    request, which may read only those hosts (fetch_url) and is never shown what another server
    answered: an answer that is not a /metrics page is refused in our words only."""
    source = (source or "").strip()
    if not source:
        raise MetricsImportError("metrics: give a file or a /metrics URL")
    if source.startswith(("http://", "https://")) or hosts is not None:
        text = fetch_url(source, timeout, hosts)
        if hosts is None:
            return parse_text(text, source, spec_tokens)
        try:
            return parse_text(text, source, spec_tokens)
        except MetricsImportError:
            raise MetricsImportError(f"metrics: {source} answered, but not with a vLLM or SGLang /metrics page that "
                                     "specviz reads (what it sent is not shown here); save it with curl and run "
                                     "`specviz import-metrics FILE` to see why") from None
    text = read_text_file(source, "metrics", MAX_BYTES, MetricsImportError,
                          missing="give a Prometheus dump, vLLM stats JSON or an http(s) /metrics URL")
    return parse_text(text, source, spec_tokens)


# --- the same figures from a specviz run ----------------------------------------------------------

def trace_spec_metrics(trace: Trace, source: str = "") -> SpecMetrics:
    """A specviz Trace's figures counted as vLLM counts them (Trace.position_metrics(),
    position_metrics.py): a draft is a step whose draft was not empty; draft tokens are its nodes
    (a tree's nodes, where vLLM drafts a chain); accepted tokens are the accepted nodes;
    per-position k is the share of drafts that accepted more than k."""
    counts = trace.position_metrics()
    drafts, tokens = float(counts.num_drafts), float(counts.num_draft_tokens)
    notes = ("tree drafts: draft tokens count every node, so the rate is per node",) \
        if any(len(s.tree) > max(s.tree.depths) for s in trace.steps if len(s.tree)) else ()
    return SpecMetrics("specviz", "trace", source or f"{trace.drafter} on {trace.model_id}",
                       counts.mean_acceptance_length if drafts else None,
                       counts.draft_acceptance_rate if tokens else None, counts.acceptance_rate_per_pos,
                       drafts, tokens, float(counts.num_accepted_tokens), notes)


def summary_lines(items: Iterable[SpecMetrics]) -> list[str]:
    """Plain-text rows for the CLI: source, acceptance length, rate, the first per-position rates."""
    rows = [f"{'source':<28} {'engine':<8} {'accept len':>10} {'rate':>6}  per position"]
    for m in items:
        length = ("n/a" if m.acceptance_length is None else f"{m.acceptance_length:.3f}"
                  if m.acceptance_length < 1e6 else f"{m.acceptance_length:.3g}")     # a gauge may say anything
        rate = "n/a" if m.acceptance_rate is None else f"{m.acceptance_rate:.3f}"
        pos = " ".join(f"{p:.2f}" for p in m.per_position[:8]) or "n/a"
        rows.append(f"{_short(m.source):<28} {m.engine:<8} {length:>10} {rate:>6}  {pos}")
        rows += [f"  note: {n}" for n in m.notes]
    return rows


def _short(text: str, width: int = 28) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]
