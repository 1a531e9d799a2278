"""Where a run leaves vanilla's output, and whether that is rounding or a bug.

    d = explain(vanilla_trace, run_trace)      # Divergence: position, top-2 logits, verdict
    d.line()                                   # one line for the CLI, the explorer and the bench

Under greedy decoding a speculative run must give vanilla's tokens. In float32 it does. In
bfloat16 / float16 a tree forward and a one-token forward add the same numbers in another
order and round differently, so where the target's two best tokens are nearly tied the two
runs can pick different ones without any bug; after that the texts go separate ways.

Each StepRecord keeps, per committed token, the target's largest logits (verify.TOP_K = 4,
as (id, logit) pairs) at the row that chose it (`StepRecord.top_logits`), recorded during the
run: exact, and free (no forward is re-run; re-running the prefix in one forward would round
differently again). At the first position p where the outputs differ, vanilla committed
token a and the run token b. The verdict is

- **near-tie** when each run committed its own argmax (ties included), each run's token is
  among the other's recorded top logits, and both margins, l_vanilla(a) - l_vanilla(b) and
  l_run(b) - l_run(a), are at most

      tolerance = K * eps(dtype) * max |logit|          (K = 8)

  with eps the dtype's machine epsilon (float32 2^-23, bfloat16 2^-7, float16 2^-10). The
  logits come out of a matmul of the hidden state with the head, so their rounding error
  scales with their magnitude: eps * |logit| is one unit in the last place of the logit
  itself, and the layers before it add more. Seen on the embedded model in bfloat16 on a
  CPU, the same token's logit at the same position moved by up to 3.8 eps * |logit|
  between vanilla's one-token forward and a drafter's tree forward (benchmarks/logit_drift.py:
  924 positions, small logits no worse than large ones); a flip
  needs the two tokens' errors to go opposite ways, up to about twice that, so K = 8 leaves
  a little headroom. A margin this small is a coin toss of rounding, not a bug.
- **mismatch** otherwise: a margin above the tolerance, a run that committed a token that is
  not its own target's argmax, or tokens outside each other's top logits. Under greedy
  decoding that is a bug in a drafter, the tree mask, the KV cache or the acceptance: report it.

Other verdicts: "identical"; "n/a (sampling)" (outputs differ by design under sampling; the
position is still given); "after an earlier turn" (the bench's later turns of a question, when
the run's earlier answer, part of this turn's prompt, already differed); "unknown" where a trace has no top-2 logits (traces written before
they were recorded). transformers' own generate in the bench returns its logits and is judged
like a drafter; a run that records none is judged from vanilla's side alone
(`classify_one_sided`): its token within the tolerance of vanilla's, or not.

Speed under low precision compares like with like: `prefix_seconds` is the time a run took to
commit its first n tokens, and the speedup over the shared prefix is vanilla's time for the
tokens both runs share over the run's time for the same tokens.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Sequence

from ..core.trace import StepRecord, Trace

K = 8.0
EPS = {"float32": 2.0 ** -23, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}

IDENTICAL, NEAR_TIE, MISMATCH, SAMPLING, UNKNOWN = "identical", "near-tie", "mismatch", "n/a (sampling)", "unknown"
FOLLOW_ON = "after an earlier turn"

TopLogits = tuple[tuple[int, float], ...]   # (id, logit) pairs, best first (verify.TOP_K of them)


def eps(dtype: str) -> float:
    """Machine epsilon of a dtype named as in Trace.dtype (unknown names: float32's)."""
    return EPS.get(dtype.replace("torch.", ""), EPS["float32"])


def tolerance(dtype: str, logits: Sequence[float]) -> float:
    """The largest margin between two logits that rounding in `dtype` can flip:
    K * eps * max |logit|."""
    return K * eps(dtype) * max((abs(x) for x in logits if x == x and abs(x) != float("inf")), default=0.0)


def coarser(a: str, b: str) -> str:
    """Of two dtypes, the one with the larger epsilon (the comparison is as exact as the worse run)."""
    return a if eps(a) >= eps(b) else b


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where two token sequences differ (the shorter length when one is a
    prefix of the other); None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def token_top_logits(steps: Sequence[StepRecord]) -> list[TopLogits]:
    """The recorded top logits per committed token, in output order ([] for old traces)."""
    out: list[TopLogits] = []
    for s in steps:
        if len(s.top_logits) != len(s.new_tokens):
            return []
        out.extend(s.top_logits)
    return out


def prefix_seconds(trace: Trace, n: int) -> float:
    """Seconds the run took to commit its first n tokens (prefill included); the step that
    crosses n is counted pro rata of its tokens."""
    total, done = 0.0, 0
    for s in trace.steps:
        if done >= n:
            break
        k = len(s.new_tokens)
        take = min(k, n - done)
        total += s.wall * (take / k if k else 1.0)
        done += take
    return total


def prefix_drift(ref: Sequence[TopLogits], run: Sequence[TopLogits], shared: int) -> tuple[float, int] | None:
    """Over the first `shared` tokens (both runs chose the same one), the largest difference
    between the two runs' logits of that token, and its position; None without logits. A
    drift that grows along the text is rounding that accumulates in the KV cache (bf16); in
    float32 anything above the tolerance is itself a sign of a bug."""
    best: tuple[float, int] | None = None
    for i in range(min(shared, len(ref), len(run))):
        if not ref[i] or not run[i] or ref[i][0][0] != run[i][0][0]:
            continue
        d = abs(ref[i][0][1] - run[i][0][1])
        if best is None or d > best[0]:
            best = (d, i)
    return best


Judged = tuple[str, str, "float | None"]      # (verdict, reason, tolerance)


def _vanilla_side(a: int, ref: TopLogits | None, tol: float | None) -> Judged | None:
    """What both judgements check first on vanilla's side: logits recorded there, and vanilla
    committed its own argmax; None when both hold."""
    if not ref:
        return UNKNOWN, "no logits recorded at this position", None
    if dict(ref).get(a) != ref[0][1]:
        return MISMATCH, f"vanilla committed token {a}, but its argmax was {ref[0][0]}", tol
    return None


def _by_tolerance(margin: float, margins: str, tol: float, dtype: str, note: str = "") -> Judged:
    """near-tie when `margin` (described by `margins`) is within the rounding tolerance, else a
    mismatch: one sentence either way, `note` added in brackets."""
    within = margin <= tol
    tail = f" ({note})" if note else ("" if within else ": not rounding")
    return (NEAR_TIE if within else MISMATCH,
            f"{margins} {'within' if within else 'above'} the {dtype} rounding tolerance {tol:.3g}{tail}", tol)


def classify(a: int, b: int, ref: TopLogits | None, run: TopLogits | None,
             dtype: str) -> Judged:
    """Greedy verdict at a differing position: vanilla committed a, the run b, with these
    recorded top logits. Returns (verdict, reason, tolerance)."""
    if not ref or not run:
        return UNKNOWN, "no logits recorded at this position", None
    in_ref, in_run = dict(ref), dict(run)
    tol = tolerance(dtype, [v for _, v in ref] + [v for _, v in run])
    if in_run.get(b) != run[0][1]:
        return MISMATCH, (f"the run committed token {b}, but its target's argmax there was {run[0][0]} "
                          f"(logit {run[0][1]:.4g}, token {b}: "
                          f"{'below its top ' + str(len(run)) if b not in in_run else format(in_run[b], '.4g')}): "
                          "a token the target did not choose was accepted"), tol
    if (vanilla := _vanilla_side(a, ref, tol)) is not None:
        return vanilla
    if b not in in_ref or a not in in_run:
        return MISMATCH, (f"the two runs' best tokens are far apart: each run's token is outside the "
                          f"other's top {min(len(ref), len(run))} logits"), tol
    m_ref, m_run = in_ref[a] - in_ref[b], in_run[b] - in_run[a]
    return _by_tolerance(max(m_ref, m_run), f"margins {m_ref:.3g} (vanilla: {a} over {b}) and {m_run:.3g} "
                                            f"(run: {b} over {a}) are", tol, dtype)


@dataclass(frozen=True)
class Divergence:
    verdict: str                        # identical / near-tie / mismatch / n/a (sampling) / unknown / after an earlier turn
    position: int | None                # first differing output token (None: identical)
    shared_tokens: int                  # tokens both outputs share from the start
    dtype: str                          # the coarser of the two runs' dtypes
    reason: str = ""
    reference_token: int | None = None  # vanilla's token at `position`
    run_token: int | None = None        # the run's token there
    reference_top: TopLogits | None = None  # vanilla's top logits there, (id, logit), best first
    run_top: TopLogits | None = None        # the run's top logits there
    tolerance: float | None = None
    reference_seconds: float = 0.0      # time each run took for the shared tokens
    run_seconds: float = 0.0
    drift: float | None = None          # over the shared tokens, the largest difference between the two
    drift_at: int | None = None         # runs' logits of the token both chose, and its position

    @property
    def shared_speedup(self) -> float | None:
        """vanilla's seconds / the run's for the tokens both share (None: nothing shared)."""
        if self.shared_tokens == 0 or self.run_seconds <= 0:
            return None
        return self.reference_seconds / self.run_seconds

    @property
    def is_bug(self) -> bool:
        return self.verdict == MISMATCH

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shared_speedup"] = self.shared_speedup
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "Divergence":
        d = {k: v for k, v in d.items() if k in Divergence.__dataclass_fields__}
        for key in ("reference_top", "run_top"):
            if d.get(key) is not None:
                d[key] = tuple((int(i), float(v)) for i, v in d[key])
        return Divergence(**d)

    def line(self, token_text: Mapping[int, str] | None = None) -> str:
        """One line: what differs, where, the top-2 logits of both runs, the verdict and why."""
        if self.verdict == IDENTICAL:
            return f"identical to vanilla ({self.shared_tokens} tokens)"
        return (f"differs from vanilla at token #{self.position}: vanilla {_show(self.reference_token, token_text)}, "
                f"run {_show(self.run_token, token_text)}; {self.explanation(token_text)}")

    def explanation(self, token_text: Mapping[int, str] | None = None) -> str:
        """The top-2 logits in both runs, the verdict and its reason."""
        logits = ""
        if self.reference_top and self.run_top:
            logits = ("top-2 logits vanilla " + ", ".join(f"{_show(i, token_text)}={v:.4g}" for i, v in self.reference_top[:2])
                      + "; run " + ", ".join(f"{_show(i, token_text)}={v:.4g}" for i, v in self.run_top[:2]) + " -> ")
        tail = " (a bug: please report it)" if self.is_bug else ""
        drift = ""
        if self.drift is not None and self.drift_at is not None and self.verdict in (NEAR_TIE, MISMATCH):
            drift = (f"; before it, the logit of the token both runs chose differed by up to {self.drift:.3g} "
                     f"(at #{self.drift_at})")
        return f"{logits}{self.verdict}{tail}: {self.reason}{drift}"

    def short(self) -> str:
        """A table cell: 'identical', 'near-tie at #37', 'mismatch at #5'."""
        return self.verdict if self.position is None else f"{self.verdict} at #{self.position}"


def _show(tok: int | None, token_text: Mapping[int, str] | None) -> str:
    if tok is None:
        return "(end)"
    piece = token_text.get(tok) if token_text is not None else None
    return f"{tok} {piece!r}" if piece is not None else str(tok)


def explain(reference: Trace, run: Trace) -> Divergence:
    """Compare `run` with `reference` (vanilla on the same input and decoding settings)."""
    return _compare(reference, run.output_ids, token_top_logits(run.steps), run.dtype,
                    lambda n: prefix_seconds(run, n))


def _compare(reference: Trace, b: Sequence[int], top_b: Sequence[TopLogits] | None, run_dtype: str,
             run_seconds: Callable[[int], float]) -> Divergence:
    """`explain` for a run known by its output ids `b`, its recorded top logits per token
    (None: it records none, judged by `classify_one_sided`), its dtype and the seconds it
    took for its first n tokens."""
    a = reference.output_ids
    pos = first_difference(a, b)
    shared = min(len(a), len(b)) if pos is None else pos
    dtype = coarser(reference.dtype, run_dtype)
    times: dict[str, Any] = {"reference_seconds": prefix_seconds(reference, shared), "run_seconds": run_seconds(shared)}
    top_a = token_top_logits(reference.steps)
    drift = prefix_drift(top_a, top_b, shared) if top_b is not None else None
    if drift is not None:
        times = {**times, "drift": drift[0], "drift_at": drift[1]}
    if pos is None:
        return Divergence(IDENTICAL, None, shared, dtype, **times)
    tok_a = a[pos] if pos < len(a) else None
    tok_b = b[pos] if pos < len(b) else None
    ref2 = top_a[pos] if pos < len(top_a) else None
    run2 = top_b[pos] if top_b is not None and pos < len(top_b) else None
    common: dict[str, Any] = dict(reference_token=tok_a, run_token=tok_b, reference_top=ref2, run_top=run2, **times)
    if float(reference.decoding.get("temperature", 0.0)) != 0.0:
        return Divergence(SAMPLING, pos, shared, dtype, "outputs differ by design under sampling", **common)
    if tok_a is None or tok_b is None:
        return Divergence(MISMATCH, pos, shared, dtype,
                          f"one output stops earlier ({len(a)} vs {len(b)} tokens)", **common)
    verdict, reason, tol = (classify(tok_a, tok_b, ref2, run2, dtype) if top_b is not None
                            else classify_one_sided(tok_a, tok_b, ref2, dtype))
    return Divergence(verdict, pos, shared, dtype, reason, tolerance=tol, **common)


def after_earlier_turn(d: Divergence, turn: int, earlier: Divergence) -> Divergence:
    """A later turn of a multi-turn question (the bench) whose prompt holds the run's own answer
    to `turn` (1-based), which already differed from vanilla's (`earlier`): the two runs
    answered different prompts, so a difference here is neither a near-tie nor a bug."""
    if d.verdict in (IDENTICAL, SAMPLING):
        return d
    from dataclasses import replace

    return replace(d, verdict=FOLLOW_ON, tolerance=None,
                   reason=(f"its prompt holds the run's answer to turn {turn}, which already left vanilla's "
                           f"text ({earlier.short()}): the two runs answered different prompts"))


def speed_note(d: Divergence) -> str:
    """How to read a speed figure next to this comparison."""
    if d.verdict == IDENTICAL:
        return "same text: the speedup compares like with like"
    if d.shared_speedup is None:
        return "the texts differ from the first token: no speed comparison over a shared text"
    return (f"the texts differ after {d.shared_tokens} tokens; over those shared tokens the run "
            f"was {d.shared_speedup:.2f}x vanilla's speed")


def with_divergence(run: Trace, reference: Trace) -> tuple[Trace, Divergence]:
    """`run` carrying its comparison with `reference` (Trace.divergence), and the comparison."""
    from dataclasses import replace

    d = explain(reference, run)
    return replace(run, divergence=d.to_dict()), d


def of_trace(trace: Trace) -> Divergence | None:
    """The comparison a trace carries (None: it was not compared with vanilla)."""
    return Divergence.from_dict(trace.divergence) if trace.divergence else None


def classify_one_sided(a: int, b: int, ref: TopLogits | None, dtype: str) -> Judged:
    """Greedy verdict from vanilla's recorded top logits alone, for a run that records none
    (a generate that returned no logits): near-tie when vanilla's margin of its token a over the run's
    token b is within the rounding tolerance; mismatch when b is outside vanilla's top logits or
    further behind. Weaker than `classify` (the run's side is unseen), and its reason says so."""
    tol = tolerance(dtype, [v for _, v in ref]) if ref else None
    if (vanilla := _vanilla_side(a, ref, tol)) is not None:
        return vanilla
    assert ref is not None and tol is not None
    in_ref = dict(ref)
    side = "the run records no logits, so only vanilla's side is checked"
    if b not in in_ref:
        return MISMATCH, (f"the run's token {b} is outside vanilla's top {len(ref)} logits, further behind than "
                          f"{dtype} rounding can explain ({side})"), tol
    margin = in_ref[a] - in_ref[b]
    return _by_tolerance(margin, f"vanilla's margin {margin:.3g} ({a} over {b}) is", tol, dtype, side)


def explain_ids(reference: Trace, ids: Sequence[int], seconds: float,
                top: Sequence[TopLogits] | None = None) -> Divergence:
    """A run known by its output ids, its total seconds and, where it kept them, its top logits
    per token (transformers' own generate in the bench): the position, and the verdict of
    `classify` when `top` is given, else from vanilla's side alone (`classify_one_sided`); the
    run's time for the shared tokens is its total pro rata of its tokens."""
    return _compare(reference, ids, top, reference.dtype, lambda n: seconds * n / len(ids) if ids else 0.0)
