"""What a run records beyond its text, chosen per run (`RunRequest.recorder`, `--record`).

The engine's step computes what acceptance needs (the argmax and the drafters' top-k per row,
and under sampling the draws of the rule, engine/accept.py); the recorder computes the rest,
on the logits' device, so that it travels in the step's one transfer (verify.py):

| recorder | keeps | costs |
| --- | --- | --- |
| `teach` | all the explorer shows: the whole proposal where the drafter's sizing cut it (StepRecord.proposal), per node the target's probability of it given its parent and per row the probability of the target's own choice (`target_prob`, `target_top_prob`), the target's TOP_LOGITS largest logits per committed token, seconds per phase, peak GPU memory | a log-sum-exp over the vocabulary per row and a gather (greedy; under sampling a gather from the distribution the rule samples anyway); on a GPU a device synchronisation at every phase edge, so each phase is charged its own kernels |
| `bench` | what the bench reports and the divergence explainer (analysis/divergence.py) reads: the top logits per committed token, seconds per phase, peak GPU memory | two sorts of TOP_LOGITS columns; no synchronisation of its own: on a GPU the forward's phase lasts until the step's one transfer, where its kernels finish |
| `off` | the text: each step's tree, accepted nodes and new tokens, its wall time, and the prefill's seconds (once a run, for the totals) | nothing |

What a recorder does not keep is left empty in the StepRecord (`()`, `{}`, None), never made up;
the Trace names its recorder (`Trace.recorder`; None in traces written before there was a choice,
which were all `teach`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..core.timing import PHASES, PeakMemory, PhaseTimer
from ..core.trace import TOP_LOGITS, StepRecord, TopLogitsRow
from ..core.transfer import to_device
from ..core.tree import DraftTree
from ..errors import ConfigError

RECORDER_NAMES = ("teach", "bench", "off")
DEFAULT_RECORDER = "teach"                # the explorer's and the library's default; the bench's is "bench"


@dataclass(frozen=True)
class Display:
    """What a recorder computed for the display, on the host."""
    target_prob: tuple[float, ...] = ()                  # [N]: p(node's token | its parent)
    target_top_prob: tuple[float, ...] = ()              # [N+1]: p(the row's argmax)
    top_logits: tuple[TopLogitsRow, ...] = ()            # [N+1]: (id, logit) x TOP_LOGITS, best first


@dataclass(frozen=True)
class Recorder:
    name: str
    sync_phases: bool        # the phase timer synchronises the device at each phase edge
    phases: tuple[str, ...]  # the phases timed and kept (StepRecord.timings)
    top_logits: bool         # per committed token, the target's TOP_LOGITS largest logits
    probabilities: bool      # target_prob and target_top_prob
    memory: bool             # peak GPU memory (StepRecord.peak_memory_mb)
    proposals: bool = False  # the drafter's whole proposal where its sizing cut it (StepRecord.proposal)

    def timer(self, device: torch.device | None) -> PhaseTimer:
        return PhaseTimer(device, sync=self.sync_phases, keep=self.phases)

    def peak_memory(self, device: torch.device | None) -> PeakMemory | None:
        return PeakMemory(device) if self.memory else None

    def on_device(self, tree: DraftTree, logits: torch.Tensor, best_values: torch.Tensor,
                  best_indices: torch.Tensor, argmax: torch.Tensor, probs: torch.Tensor | None) -> list[torch.Tensor]:
        """The display's tensors, computed where the logits are (they join the step's one transfer).
        logits [N+1, V]; best_values / best_indices [N+1, k >= TOP_LOGITS] from topk; argmax [N+1];
        probs [N+1, V] the sampling distribution, or None under greedy decoding."""
        out: list[torch.Tensor] = []
        if self.top_logits:
            out += display_order(best_values[:, :TOP_LOGITS], best_indices[:, :TOP_LOGITS])  # 2 x [N+1, 4]
        if self.probabilities:
            rows = to_device([p + 1 for p in tree.parents], logits.device)                 # [N]
            toks = to_device(tree.tokens, logits.device)                                     # [N]
            if probs is None:          # greedy: each row's normaliser, no [N+1, V] softmax written
                lse = logits.logsumexp(-1)                                                  # [N+1]
                out += [(logits[rows, toks] - lse[rows]).exp(),                             # [N]
                        (best_values[:, 0] - lse).exp()]                                    # [N+1]
            else:                      # the distribution the rule samples from
                out += [probs[rows, toks], probs.gather(1, argmax[:, None])[:, 0]]
        return out

    def on_host(self, parts: list[torch.Tensor]) -> Display:
        """on_device's tensors, now on the host, as the display's values."""
        top: tuple[TopLogitsRow, ...] = ()
        if self.top_logits:
            ids, vals, parts = parts[0], parts[1], parts[2:]
            top = tuple(tuple(zip(i, v)) for i, v in zip(ids.tolist(), vals.tolist()))
        if not self.probabilities:
            return Display(top_logits=top)
        return Display(tuple(parts[0].tolist()), tuple(parts[1].tolist()), top)

    def step(self, *, index: int, committed_len: int, tree: DraftTree, accepted: tuple[int, ...], bonus: int,
             new_tokens: tuple[int, ...], target_top: tuple[int, ...], display: Display,
             timings: dict[str, float], wall: float, info: dict[str, Any], stop: str | None,
             memory: PeakMemory | None) -> StepRecord:
        """The step's record, with what this recorder keeps."""
        rows = [0, *(a + 1 for a in accepted)][:len(new_tokens)]    # the logits row that chose each new token
        return StepRecord(
            index=index, committed_len=committed_len, tree=tree, accepted=accepted, bonus=bonus,
            new_tokens=new_tokens, target_top=target_top, target_prob=display.target_prob,
            timings=timings, wall=wall, info=info, stop=stop,
            top_logits=tuple(display.top_logits[r] for r in rows) if display.top_logits else (),
            peak_memory_mb=memory.peak_mb() if memory is not None else None,
            target_top_prob=display.target_top_prob)


TEACH = Recorder("teach", sync_phases=True, phases=PHASES, top_logits=True, probabilities=True, memory=True,
                 proposals=True)
BENCH = Recorder("bench", sync_phases=False, phases=PHASES, top_logits=True, probabilities=False, memory=True)
# off times the prefill only (once a run), so that a trace's totals stay true
OFF = Recorder("off", sync_phases=False, phases=("prefill",), top_logits=False, probabilities=False, memory=False)
RECORDERS = {r.name: r for r in (TEACH, BENCH, OFF)}


def recorder(name: str | Recorder) -> Recorder:
    """The recorder of that name (a Recorder as it is); ConfigError naming the known ones."""
    if isinstance(name, Recorder):
        return name
    if name not in RECORDERS:
        raise ConfigError("recorder", f"unknown recorder {name!r}; use {', '.join(RECORDER_NAMES)}")
    return RECORDERS[name]


def display_order(values: torch.Tensor, indices: torch.Tensor) -> list[torch.Tensor]:
    """values, indices: [N+1, K] from topk -> [ids, logits] [N+1, K] per row best first, equal
    logits by lowest id (so the argmax leads its ties), on the device: two sorts of K columns."""
    by_id = indices.argsort(dim=-1)                               # [N+1, K]
    ids, vals = indices.gather(1, by_id), values.gather(1, by_id)
    order = vals.argsort(dim=-1, descending=True, stable=True)    # stable: equal logits keep id order
    return [ids.gather(1, order), vals.gather(1, order)]

