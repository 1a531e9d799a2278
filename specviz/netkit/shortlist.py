"""A draft module whose LM head is a shortlist of the target's rows (GLIDE's draft, the Medusa
and Hydra heads): `set_vocab` for the `vocab_ids` buffer and the rows it caches."""
from __future__ import annotations

from typing import Any

import torch


class Shortlisted:
    """set_vocab for a draft module whose LM head is a shortlist of the target's rows: it holds a
    `vocab_ids` buffer [K] (K = `spec.vocab`) and caches those rows in `_head` (GlideDraft, and
    heads/model.DraftHeads)."""
    spec: Any
    vocab_ids: torch.Tensor
    _head: torch.Tensor | None

    def set_vocab(self, ids: torch.Tensor) -> None:
        """The shortlist: `spec.vocab` distinct token ids [K]."""
        ids = torch.as_tensor(ids, dtype=torch.long).flatten()
        if ids.numel() != self.spec.vocab or ids.unique().numel() != ids.numel():
            raise ValueError(f"the shortlist needs {self.spec.vocab} distinct ids, got {ids.numel()}")
        self.vocab_ids.copy_(ids.to(self.vocab_ids.device))
        self._head = None
