"""The model-dependent DB of Hierarchy Drafting: n-grams the target model itself tends to write.

Built by generating greedy answers to chat prompts with the target, counting each n-gram
once per answer, and keeping the `top` most frequent. Looked up by the first token of the
n-gram (the last committed token); values are the n - 1 tokens after it, most frequent first.

    grams:   [K, n] int32, sorted by first token, then count descending
    counts:  [K] int32
    first:   [V + 1] int64, rows of token v = grams[first[v]:first[v+1]]
"""
from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from ..models.loading import LoadedModel


class ModelDB:
    def __init__(self, grams: np.ndarray, counts: np.ndarray, first: np.ndarray) -> None:
        self.grams, self.counts, self.first = grams, counts, first

    @property
    def n(self) -> int:
        return int(self.grams.shape[1]) if self.grams.ndim == 2 else 0

    def __len__(self) -> int:
        return len(self.counts)

    @staticmethod
    def from_counts(counter: Counter, vocab_size: int, n: int, top: int) -> "ModelDB":
        best = [g for g, _ in counter.most_common(top)]
        if not best:
            return ModelDB(np.zeros((0, n), np.int32), np.zeros(0, np.int32), np.zeros(vocab_size + 1, np.int64))
        grams = np.asarray(best, dtype=np.int32)                     # [K, n]
        counts = np.asarray([counter[g] for g in best], dtype=np.int32)
        order = np.lexsort((-counts, grams[:, 0]))
        grams, counts = grams[order], counts[order]
        first = np.searchsorted(grams[:, 0], np.arange(vocab_size + 1)).astype(np.int64)
        return ModelDB(grams, counts, first)

    def lookup(self, token: int, limit: int) -> list[tuple[tuple[int, ...], int]]:
        """Up to `limit` (continuation, count) after `token`, most frequent first."""
        if not 0 <= token < len(self.first) - 1:
            return []
        lo, hi = int(self.first[token]), int(self.first[token + 1])
        hi = min(hi, lo + limit)
        return [(tuple(self.grams[i, 1:].tolist()), int(self.counts[i])) for i in range(lo, hi)]


def count_ngrams(outputs: Iterable[Sequence[int]], n: int) -> Counter:
    """Each n-gram counted once per output (document frequency), as the authors do."""
    counter: Counter = Counter()
    for ids in outputs:
        ids = [int(t) for t in ids]
        counter.update({tuple(ids[i: i + n]) for i in range(len(ids) - n + 1)})
    return counter


PROMPT_TOKENS = 768          # a chat prompt keeps at most its last 768 tokens


def prompt_ids(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]) -> list[list[int]]:
    """The token ids generate_outputs gives the target for each chat prompt (chat template
    applied, at most the last PROMPT_TOKENS), e.g. to check that they and the answers fit the
    model's context before generating."""
    from ..models.prompts import build_prompt

    return [list(build_prompt(tokenizer, p).ids)[-PROMPT_TOKENS:] for p in prompts]


def generate_outputs(lm: LoadedModel, prompts: Sequence[str], max_new_tokens: int, batch_size: int = 8,
                     progress: Callable[[int], None] | None = None) -> list[list[int]]:
    """Greedy answers of the target to chat prompts, in left-padded batches (one forward per
    token serves the whole batch; on CPU a batch of 8 costs about what one row does)."""
    import torch

    tok = lm.tokenizer
    eos = sorted(lm.eos_ids)
    pad = tok.pad_token_id if tok.pad_token_id is not None else eos[0]
    outputs: list[list[int]] = []
    for start in range(0, len(prompts), batch_size):
        batch = prompt_ids(tok, prompts[start: start + batch_size])
        width = max(map(len, batch))
        ids = torch.tensor([[pad] * (width - len(b)) + b for b in batch], device=lm.device)
        mask = torch.tensor([[0] * (width - len(b)) + [1] * len(b) for b in batch], device=lm.device)
        with torch.inference_mode():
            out = lm.model.generate(ids, attention_mask=mask, max_new_tokens=max_new_tokens,
                                    do_sample=False, eos_token_id=eos, pad_token_id=pad)
        for row in out[:, width:].tolist():
            cut = next((i for i, t in enumerate(row) if t in lm.eos_ids), len(row))
            outputs.append(row[:cut])
        if progress:
            progress(len(batch))
    return outputs
