"""StepRecord and Trace: what a generation did, step by step, as plain data.

The UI, the CLI and the benchmark read only these. A Trace carries the text of every token
it mentions (`token_text`), so it can be replayed and drawn without the model.
JSON round-trip: `Trace.to_json()` / `Trace.from_json()`. A trace file is untrusted input:
it is checked against the JSON Schema shipped as specviz/data/trace.schema.json (types, required
fields, non-negative numbers; other tools can use the same file), then `check_values` checks
what a schema cannot (accepted nodes form a path in the step's tree, every token id has its
text, steps are numbered 0, 1, ...), so a trace that loads can always be drawn. JSON nested
deeper than the parser allows is refused with a message, not a RecursionError.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import TraceFormatError
from ..files.json_schema import SchemaError, shipped_schema, validate
from .proposal import MAX_PROPOSAL_NODES, PENDING_KEY, Proposal
from .tree import DraftTree
from ..files.user_files import FileCheckError, loads_json

if TYPE_CHECKING:
    from .calibration import Calibration
    from .position_metrics import PositionCounts

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)     # 1: no per-position pieces (they are rebuilt from token_text)
SCHEMA_FILE = "trace.schema.json"       # in specviz/data


TOP_LOGITS = 4     # per committed token, how many of the target's largest logits a trace keeps
TopLogitsRow = tuple[tuple[int, float], ...]   # one row's largest logits as (id, logit) pairs, best first
# what made a trace's per-step records (engine/record.py); a trace without one was made by `teach`
RECORDERS = ("teach", "bench", "off")


@dataclass(frozen=True, kw_only=True)
class StepRecord:
    """One speculative step, built with keywords (15 fields: a positional call would be
    unreadable and break when a field is added); its JSON form is `asdict`, read back by name."""
    index: int                         # 0-based step number
    committed_len: int                 # committed tokens before the step (prompt included)
    tree: DraftTree
    accepted: tuple[int, ...]          # accepted node ids, root's child first
    bonus: int                         # the target's own token after the accepted path
    new_tokens: tuple[int, ...]        # what the step committed (accepted + bonus, cut at a stop)
    target_top: tuple[int, ...]        # target argmax per input row: root, then each node
    # target probability of each node's token given its parent; () where the recorder keeps none
    target_prob: tuple[float, ...]
    timings: dict[str, float]          # seconds per phase (timing.PHASES) the recorder kept
    wall: float                        # seconds of the whole step (prefill included for step 0)
    info: dict[str, Any] = field(default_factory=dict)  # drafter notes (JSON-able)
    stop: str | None = None            # "eos", "length", "stop_string" on the last step
    # per new token, the target's largest logits (TOP_LOGITS of them) at the row that chose
    # it, as (id, logit) pairs, best first; empty in traces written before they were kept, and
    # where the recorder keeps none (`off`)
    top_logits: tuple[TopLogitsRow, ...] = ()
    peak_memory_mb: float | None = None  # peak GPU memory allocated so far in the run (None: not on a GPU)
    # the target's probability of its own top token per input row (root, then each node):
    # what the target wanted where it rejected a draft; () in traces recorded before it existed,
    # and where the recorder keeps no probabilities (`bench`, `off`)
    target_top_prob: tuple[float, ...] = ()
    # what the drafter proposed before its own sizing cut the tree (core/proposal.py): the uncut
    # tree, each node's chance, the nodes kept; None where nothing was cut (and in older traces)
    proposal: Proposal | None = None

    def __post_init__(self) -> None:
        """Take a proposal the drafter left in the notes (DraftContext.keep_proposal) into
        `proposal`, fitted to the tree the target verified (the engine may have dropped nodes
        after the cut); dropped where the step's tree is not the proposal's (the drafter failed)."""
        pending = self.info.pop(PENDING_KEY, None) if isinstance(self.info, dict) else None
        if isinstance(pending, Proposal) and self.proposal is None and "drafter_error" not in self.info:
            object.__setattr__(self, "proposal", pending.fitted(self.tree))

    @property
    def accepted_len(self) -> int:
        """Tokens the step committed, the bonus token included (1 = plain decoding)."""
        return len(self.new_tokens)

    @property
    def token_ids(self) -> set[int]:
        """Every token id the step's trees hold (the verified tree's, the whole proposal's) and
        the target's choices: what a trace's token_text must name."""
        ids = {*self.tree.tokens, *self.target_top}
        if self.proposal is not None:
            ids.update(self.proposal.tree.tokens)
        return ids

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tree"] = self.tree.to_dict()
        if self.proposal is None:        # written only where there is one: older traces read back as they were
            del d["proposal"]
        else:
            d["proposal"] = self.proposal.to_dict()
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "StepRecord":
        d = dict(d)
        d["tree"] = DraftTree.from_dict(d["tree"])
        if d.get("proposal") is not None:
            d["proposal"] = Proposal.from_dict(d["proposal"])
        for key in ("accepted", "new_tokens", "target_top", "target_prob", "target_top_prob"):
            if key not in d:
                continue
            d[key] = tuple(d[key])
        d["top_logits"] = tuple(tuple((int(i), float(v)) for i, v in row) for row in d.get("top_logits") or ())
        return StepRecord(**d)


def acceptance_by_depth(steps: "Sequence[StepRecord]") -> dict[int, tuple[int, int]]:
    """depth -> (steps where a draft token at that depth was tested, steps where one was
    accepted). Depth d is tested when the accepted path reached depth d - 1 and the node
    there has draft children; depths come out contiguous from 1."""
    out: dict[int, list[int]] = {}
    for s in steps:
        path = [-1, *s.accepted]                  # root, then the accepted nodes
        for d in range(1, len(path) + 1):
            if not s.tree.children.get(path[d - 1]):
                break                             # nothing drafted below: depth d not tested
            rec = out.setdefault(d, [0, 0])
            rec[0] += 1
            rec[1] += int(len(s.accepted) >= d)
    return {d: (v[0], v[1]) for d, v in sorted(out.items())}


@dataclass(frozen=True)
class Totals:
    new_tokens: int
    steps: int
    seconds: float                     # sum of step wall times (prefill included)
    prefill_seconds: float
    tokens_per_s: float
    mean_accepted: float               # new tokens per step, the bonus token included
    phase_seconds: dict[str, float]

    @staticmethod
    def of(steps: list[StepRecord]) -> "Totals":
        new = sum(len(s.new_tokens) for s in steps)
        seconds = sum(s.wall for s in steps)
        phases: dict[str, float] = {}
        for s in steps:
            for k, v in s.timings.items():
                phases[k] = phases.get(k, 0.0) + v
        return Totals(new, len(steps), seconds, phases.get("prefill", 0.0),
                      new / seconds if seconds > 0 else 0.0,
                      new / len(steps) if steps else 0.0, phases)


@dataclass(frozen=True)
class Trace:
    model_id: str
    drafter: str
    drafter_config: dict[str, Any]
    decoding: dict[str, Any]
    prompt_text: str
    prompt_ids: tuple[int, ...]
    steps: tuple[StepRecord, ...]
    output_ids: tuple[int, ...]
    output_text: str
    token_text: dict[int, str]         # id -> a label for the token out of context, for every id in the trace
    totals: Totals
    stop_reason: str
    device: str = "cpu"
    dtype: str = "float32"
    errors: tuple[str, ...] = ()       # e.g. a drafter that failed (decoding went on without it)
    context_char_span: tuple[int, int] | None = None   # where the user's context sits in prompt_text
    verify_ratio: float | None = None  # mean calibrated cost of this run's verify forwards, in one-row forwards
    # how the target ran (models.LoadedModel.runtime): device, dtype, cpu_linear, attention, and
    # device_map (module -> device) for a target split across devices with accelerate
    runtime: dict[str, Any] = field(default_factory=dict)
    # the text of each output / prompt token in its place (token_pieces.py): "".join(output_pieces)
    # == output_text; the prompt's are decoded with special tokens kept, to find them in prompt_text
    output_pieces: tuple[str, ...] = ()
    prompt_pieces: tuple[str, ...] = ()
    peak_memory_mb: float | None = None   # peak GPU memory of the run, MiB (None: not on a GPU)
    # how the output compares with vanilla's on the same input (divergence.Divergence.to_dict()),
    # set where a run is checked against vanilla (generate --check, the Compare tab); None otherwise
    divergence: dict[str, Any] | None = None
    # what the drafter's per-node confidence is (drafters.base.CONFIDENCE_KINDS: "probability",
    # "path_probability", "chance"), for the calibration view; None: it has none (or an older trace)
    confidence: str | None = None
    # a drafter that raised and was turned off for the rest of the generation (decoding went on
    # without drafts): {"step": the step it failed at, "phase": "propose" or "observe", "error":
    # "TypeError: ..."}; None when it never failed, and in traces written before it was kept
    drafter_disabled: dict[str, Any] | None = None
    # which recorder made the steps (RECORDERS, engine/record.py): what they keep beyond the text;
    # None in traces written before the choice existed (they were all "teach")
    recorder: str | None = None
    # the forward-cost curve that sized the drafts (models/cost_cache.py): {"key": the machine, model,
    # dtype, threads and cpu_linear it was measured for, "measured_at": ISO time, "age_s": its age when
    # the run started, "source": "disk" | "timed" | "given"}; None in older traces
    cost_curve: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    @property
    def recorded_by(self) -> str:
        """The recorder that made the steps ("teach" for a trace from before the choice)."""
        return self.recorder or "teach"

    def draft_metrics(self) -> dict[str, float]:
        """For model drafters (draft_model, self_draft, glide): acceptance rate alpha, cost
        coefficient c, gamma and the expected speedup (draft_metrics.py), with `verify_ratio`
        and `priced` (the expected speedup with the verify forward priced by the model's cost
        calibration) where the trace has the ratio; {} otherwise."""
        from .draft_metrics import priced_speedup, summarize
        m = summarize(self.steps)
        if m and self.verify_ratio:
            m["verify_ratio"] = self.verify_ratio
            m["priced"] = priced_speedup(m["alpha"], int(m["gamma"]), m["c"], self.verify_ratio)
        return m

    def position_metrics(self) -> "PositionCounts":
        """Acceptance per draft position under vLLM's metric names (position_metrics.py)."""
        from .position_metrics import position_counts
        return position_counts(self.steps)

    def calibration(self) -> "Calibration | None":
        """The drafter's confidence against what the target accepted (calibration.py); None
        where the drafter declares no confidence."""
        from .calibration import of_trace
        return of_trace(self)

    def step_pieces(self, step_index: int) -> tuple[str, ...]:
        """The text of each token the step committed, in its place in the output."""
        start = sum(len(s.new_tokens) for s in self.steps[:step_index])
        return self.output_pieces[start:start + len(self.steps[step_index].new_tokens)]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["steps"] = [s.to_dict() for s in self.steps]
        d["token_text"] = {str(k): v for k, v in self.token_text.items()}
        for key in ("recorder", "cost_curve"):         # written when known: an older trace reads back as it was
            if d[key] is None:
                del d[key]
        # derived from the steps, written for other tools (vLLM's counter names); recomputed, not read
        d["spec_decode"] = self.position_metrics().to_dict()
        return d

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Trace":
        if not isinstance(d, dict):
            raise TraceFormatError("a trace must be a JSON object")
        version = d.get("schema_version")
        if type(version) is not int or version not in READABLE_VERSIONS:
            raise TraceFormatError(
                f"trace schema_version {version!r} is not supported (this specviz reads "
                f"{', '.join(map(str, READABLE_VERSIONS))})")
        try:
            validate(d, shipped_schema(SCHEMA_FILE))
        except SchemaError as err:
            raise TraceFormatError(f"malformed trace: {err}") from None
        try:
            d = dict(d)
            d.pop("spec_decode", None)          # derived (to_dict): the steps are the record
            d["steps"] = tuple(StepRecord.from_dict(s) for s in d["steps"])
            d["totals"] = Totals(**d["totals"])
            d["token_text"] = {int(k): v for k, v in d["token_text"].items()}
            if version == 1:          # per-id text only: the closest per-position pieces it has
                d["output_pieces"] = [d["token_text"].get(i, "") for i in d["output_ids"]]
                d["prompt_pieces"] = [d["token_text"].get(i, "") for i in d["prompt_ids"]]
                d["schema_version"] = SCHEMA_VERSION
            for key in ("prompt_ids", "output_ids", "errors"):
                d[key] = tuple(d[key])
            for key in ("output_pieces", "prompt_pieces"):
                d[key] = tuple(d.get(key, ()))
            if d.get("context_char_span") is not None:
                d["context_char_span"] = tuple(d["context_char_span"])
            trace = Trace(**d)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise TraceFormatError(f"malformed trace: {type(err).__name__}: {err}") from None
        check_values(trace)
        return trace

    @staticmethod
    def from_json(text: str) -> "Trace":
        try:
            data = loads_json(text, "trace")      # depth-limited: no RecursionError
        except FileCheckError as err:
            raise TraceFormatError(str(err)) from None
        return Trace.from_dict(data)


MAX_SCORE = 1e15          # a draft score: a probability, or a count of corpus occurrences
MAX_MIB = 2.0**40         # peak memory in MiB: 1 EiB


def check_values(trace: Trace) -> None:
    """TraceFormatError for values the schema cannot rule out but the figures would trip on."""
    def bad(message: str) -> TraceFormatError:
        return TraceFormatError(f"malformed trace: {message}")

    known = trace.token_text
    def need_text(ids: Sequence[int], where: str) -> None:
        missing = next((t for t in ids if t not in known), None)
        if missing is not None:
            raise bad(f"{where}: token id {missing} has no entry in token_text")

    need_text(trace.prompt_ids, "prompt_ids")
    need_text(trace.output_ids, "output_ids")
    for name, pieces, ids in (("output_pieces", trace.output_pieces, trace.output_ids),
                              ("prompt_pieces", trace.prompt_pieces, trace.prompt_ids)):
        if len(pieces) != len(ids):
            raise bad(f"{name}: {len(pieces)} pieces for {len(ids)} token ids")
    for k, s in enumerate(trace.steps):
        where = f"steps[{k}]"
        if s.index != k:
            raise bad(f"{where}: index {s.index}, expected {k} (steps must be numbered 0, 1, ... without "
                      "duplicates or gaps)")
        n = len(s.tree)
        parent = -1
        for a in s.accepted:
            if not 0 <= a < n:
                raise bad(f"{where}.accepted: node {a} is not in the step's tree of {n} nodes")
            if s.tree.parents[a] != parent:
                raise bad(f"{where}.accepted: node {a} does not continue the accepted path")
            parent = a
        shown = trace.recorded_by == "teach" or bool(s.target_prob)    # () where the recorder keeps none
        if shown and len(s.target_prob) != n:
            raise bad(f"{where}.target_prob: {len(s.target_prob)} values for {n} tree nodes")
        if len(s.target_top) < 1 + len(s.accepted):
            raise bad(f"{where}.target_top: {len(s.target_top)} values, fewer than the accepted path needs")
        if s.target_top_prob and len(s.target_top_prob) != len(s.target_top):
            raise bad(f"{where}.target_top_prob: {len(s.target_top_prob)} values for {len(s.target_top)} rows")
        if not 1 <= len(s.new_tokens) <= len(s.accepted) + 1:
            raise bad(f"{where}.new_tokens: {len(s.new_tokens)} tokens after {len(s.accepted)} accepted")
        bad_score = next((x for x in s.tree.scores or () if not (math.isfinite(x) and 0 <= x <= MAX_SCORE)), None)
        if bad_score is not None:        # a probability or a count (kit/base.py CONFIDENCE_KINDS): never -5 or 1e308
            raise bad(f"{where}.tree.scores: {bad_score:g} is not a draft score (a probability or a count, from 0 "
                      f"to {MAX_SCORE:g})")
        if s.peak_memory_mb is not None and not (math.isfinite(s.peak_memory_mb) and s.peak_memory_mb <= MAX_MIB):
            raise bad(f"{where}.peak_memory_mb: {s.peak_memory_mb:g} MiB is more memory than any machine has")
        if s.proposal is not None:
            check_proposal(s, where)
            need_text(s.proposal.tree.tokens, f"{where}.proposal.tree.tokens")
        need_text(s.tree.tokens, f"{where}.tree.tokens")
        need_text(s.new_tokens, f"{where}.new_tokens")
        need_text(s.target_top, f"{where}.target_top")
    if trace.peak_memory_mb is not None and not (math.isfinite(trace.peak_memory_mb) and trace.peak_memory_mb <= MAX_MIB):
        raise bad(f"peak_memory_mb: {trace.peak_memory_mb:g} MiB is more memory than any machine has")
    committed = tuple(t for s in trace.steps for t in s.new_tokens)
    if committed != trace.output_ids:
        raise bad("output_ids are not the steps' new_tokens one after another")
    before = len(trace.prompt_ids)             # committed_len: the prompt and every earlier step's tokens
    for k, s in enumerate(trace.steps):
        if s.committed_len != before:
            raise bad(f"steps[{k}].committed_len: {s.committed_len}, but the prompt and the earlier steps "
                      f"committed {before} tokens")
        before += len(s.new_tokens)
    if trace.recorder is not None and trace.recorder not in RECORDERS:
        raise bad(f"recorder {trace.recorder!r} is not one of {', '.join(RECORDERS)}")
    off = trace.drafter_disabled
    if off is not None and not off["step"] < len(trace.steps):
        raise bad(f"drafter_disabled: step {off['step']} is not one of the {len(trace.steps)} steps")
    span = trace.context_char_span
    if span is not None and not span[0] <= span[1] <= len(trace.prompt_text):
        raise bad(f"context_char_span {list(span)} is not a span of prompt_text ({len(trace.prompt_text)} characters)")


def check_proposal(s: StepRecord, where: str) -> None:
    """TraceFormatError unless the step's proposal holds its verified tree: the kept nodes, in
    order, as the tree's first nodes (core/proposal.py), within the node limit."""
    p = s.proposal
    assert p is not None
    if len(p.tree) > MAX_PROPOSAL_NODES:
        raise TraceFormatError(f"malformed trace: {where}.proposal: {len(p.tree):,} nodes; at most "
                               f"{MAX_PROPOSAL_NODES:,} in one tree")
    if not p.matches(s.tree):
        raise TraceFormatError(f"malformed trace: {where}.proposal: its kept nodes {list(p.kept)[:8]} are not the "
                               "step's verified tree (the same tokens and parents, in order)")
    bad_score = next((x for x in p.tree.scores or () if not (math.isfinite(x) and 0 <= x <= MAX_SCORE)), None)
    if bad_score is not None:
        raise TraceFormatError(f"malformed trace: {where}.proposal.tree.scores: {bad_score:g} is not a draft score")
