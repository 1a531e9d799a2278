"""Draft heads on the target's final hidden state: Medusa-1 and Hydra, for Llama-style targets.

Head k (k = 1..n_heads) reads the target's final (post-norm) hidden state h_t [H] of the row
whose logits chose token x_{t+1} (the root of a speculative step, the target's bonus token)
and predicts x_{t+1+k}:

- Medusa-1 (Cai et al. 2024, "Medusa: Simple LLM Inference Acceleration Framework with
  Multiple Decoding Heads", section 2.1.1): z = h_t, then `layers` residual blocks
  z <- z + SiLU(W z + b) (W [H, H] and b zero at the start, so an untrained head is the
  target's own LM head: it guesses the root again).
- Hydra (Ankner et al. 2024, "Hydra: Sequentially-Dependent Draft Heads for Medusa
  Decoding", section 3): head k also reads the input embeddings of the tokens before its own
  on the branch, x_{t+1} (the root) .. x_{t+k}: its first block is
  z = h_t + SiLU(W_k [h_t; e(x_{t+1}); ..; e(x_{t+k})] + b) (W_k [H, (k+1) H] and b zero
  at the start), then `layers - 1` Medusa blocks. The authors' code adds a second linear of the
  whole input as the residual; here the residual is h_t alone, which halves the head's size.

Every head ends in the target's LM head restricted to a shortlist of `vocab` frequent tokens
(the ids are stored; the rows are the target's own, frozen and not stored), as GLIDE's head
(glide/model.py; the shortlist is netkit/shortlist.py), so drafting costs a few [H, H] matmuls and one [K, H] one per row. Tokens
outside the shortlist are never drafted. The embeddings Hydra reads are the target's own too.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import check_choice
from ..netkit.shortlist import Shortlisted
from ..models.cpu_linear import few_row_linear

if TYPE_CHECKING:
    from transformers import PreTrainedModel

KINDS = ("medusa", "hydra")


@dataclass(frozen=True)
class HeadsSpec:
    kind: str                  # "medusa" or "hydra"
    n_heads: int               # head k predicts the token k+1 positions after the hidden state's row
    layers: int                # residual blocks per head
    hidden: int                # the target's hidden size H
    vocab: int                 # shortlist size K (the ids are the buffer `vocab_ids`)

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, KINDS)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ResBlock(nn.Module):
    """x [.., H] -> x + SiLU(W x + b); with `inputs` > H the residual is the first H features."""

    def __init__(self, hidden: int, inputs: int | None = None) -> None:
        super().__init__()
        self.hidden = hidden
        self.linear = nn.Linear(inputs or hidden, hidden)
        nn.init.zeros_(self.linear.weight)           # starts as the identity (Medusa zeroes W only;
        nn.init.zeros_(self.linear.bias)             # b too here, so an untrained head is the LM head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[..., : self.hidden] + nn.functional.silu(few_row_linear(x, self.linear.weight, self.linear.bias))


class DraftHeads(Shortlisted, nn.Module):
    """The heads; the frozen target supplies the shortlisted LM head rows and the embeddings."""

    def __init__(self, spec: HeadsSpec, target: PreTrainedModel) -> None:
        super().__init__()
        self.spec = spec
        h = spec.hidden
        self.heads = nn.ModuleList(
            nn.Sequential(*[ResBlock(h, h * (k + 2) if spec.kind == "hydra" and i == 0 else None)
                            for i in range(spec.layers)])
            for k in range(spec.n_heads))                                    # head index k = 0.. : head k+1
        self.register_buffer("vocab_ids", torch.arange(spec.vocab))          # [K], set by set_vocab / load
        self.__dict__["target"] = target                                     # not a submodule: not saved
        self._head: torch.Tensor | None = None                               # [K, H] rows of the LM head

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids [...] -> the target's input embeddings [..., H]."""
        return self.target.get_input_embeddings()(ids)

    def shortlist_logits(self, z: torch.Tensor) -> torch.Tensor:
        """z [..., H] -> logits over the shortlist [..., K]."""
        if self._head is None or self._head.device != z.device or self._head.dtype != z.dtype:
            weight = self.target.lm_head.weight
            self._head = weight[self.vocab_ids.to(weight.device)].detach().to(z.device, z.dtype)   # [K, H]
        return few_row_linear(z, self._head)

    def head_input(self, k: int, hidden: torch.Tensor, before: torch.Tensor | None) -> torch.Tensor:
        """Head k's (0-based) input: hidden [N, H]; Hydra: with the embeddings of the k+1 tokens
        before its own, before [N, k+1] ids -> [N, (k+2) H]."""
        if self.spec.kind == "medusa":
            return hidden
        if before is None or before.shape[-1] != k + 1:
            raise ValueError(f"hydra head {k + 1} needs the {k + 1} tokens before its own")
        emb = self.embed(before).to(hidden.device, hidden.dtype)             # [N, k+1, H]
        return torch.cat([hidden, emb.flatten(-2)], -1)

    def logits(self, k: int, hidden: torch.Tensor, before: torch.Tensor | None = None) -> torch.Tensor:
        """Head k (0-based) over N rows: hidden [N, H] (before [N, k+1] for Hydra) -> [N, K]."""
        return self.shortlist_logits(self.heads[k](self.head_input(k, hidden, before)))

    def train_logits(self, hidden: torch.Tensor, ids: torch.Tensor) -> list[torch.Tensor]:
        """Training (teacher forcing): the target's hidden [B, T, H] over ids [B, T]; head k
        (0-based) at position t reads h_t (and ids t+1 .. t+k+1) and predicts position t+k+2
        (whose label is the target's choice at row t+k+1). Returns per head the logits
        [B, T-k-1, K] for t = 0 .. T-k-2."""
        t_len, out = ids.shape[1], []
        for k in range(self.spec.n_heads):
            n = t_len - k - 1
            if n <= 0:
                break
            before = None
            if self.spec.kind == "hydra":
                before = torch.stack([ids[:, 1 + j: 1 + j + n] for j in range(k + 1)], -1)   # [B, n, k+1]
            out.append(self.logits(k, hidden[:, :n], before))
        return out

    def vocab_index(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> their index in the shortlist, -100 (cross-entropy's ignore) outside it."""
        where = torch.full((int(self.target.lm_head.weight.shape[0]),), -100, dtype=torch.long,
                           device=ids.device)
        where[self.vocab_ids.to(ids.device)] = torch.arange(self.spec.vocab, device=ids.device)
        return where[ids]
