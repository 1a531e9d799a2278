"""SuffixDecoding's global tree of earlier outputs, with arctic-inference's eviction: whole
outputs leave it, oldest first (arctic_inference/suffix_decoding/cache.py,
SuffixDecodingCache._maybe_evict_requests: past `max_cached_requests` responses, the first
cached one that is not the newest is evicted, "FIFO order"; evict_cached_response removes its
sequence from the global tree).

`max_outputs` is that bound (the current output counted, as arctic-inference allocates the new
request's slot before it evicts); `max_tokens` is a memory bound of this project that evicts
the same way (oldest whole outputs first) when adding an output's tokens would pass it. The
output being generated is never evicted to make room for itself: when it alone fills
`max_tokens`, its later tokens are not added. 0 means no bound for either.

Not thread-safe by itself: the drafter holds the store entry's lock around every call.
"""
from __future__ import annotations

from collections import OrderedDict

from ...index.suffix_tree import SuffixTree


class OutputHistory:
    def __init__(self, max_depth: int, max_outputs: int = 0, max_tokens: int = 0) -> None:
        self.tree = SuffixTree(max_depth)
        self.max_outputs, self.max_tokens = max_outputs, max_tokens
        self.outputs: OrderedDict[int, list[int]] = OrderedDict()    # sequence id -> its tokens, oldest first
        self.evicted = 0                                             # outputs evicted so far

    @property
    def total_tokens(self) -> int:
        return self.tree.total_tokens

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self.outputs

    def start(self, seq_id: int) -> None:
        """A new output: its slot, then the oldest other outputs go while more than max_outputs."""
        self.outputs[seq_id] = []
        while self.max_outputs and len(self.outputs) > self.max_outputs:
            self._evict_oldest(keep=seq_id)

    def add(self, seq_id: int, tokens: list[int]) -> bool:
        """Append `tokens` to output `seq_id`, evicting the oldest other outputs while the
        tokens would not fit. False (nothing added) when the output was evicted or cannot fit."""
        if seq_id not in self.outputs:
            return False
        if self.max_tokens:
            while self.total_tokens + len(tokens) > self.max_tokens and self._evict_oldest(keep=seq_id):
                pass
            if self.total_tokens + len(tokens) > self.max_tokens:
                return False
        self.tree.extend(seq_id, tokens)
        self.outputs[seq_id].extend(tokens)
        return True

    def _evict_oldest(self, keep: int) -> bool:
        """Evict the oldest output other than `keep`; False when there is none."""
        for seq_id in self.outputs:
            if seq_id != keep:
                tokens = self.outputs.pop(seq_id)
                if tokens:
                    self.tree.remove(seq_id, tokens)
                self.evicted += 1
                return True
        return False
