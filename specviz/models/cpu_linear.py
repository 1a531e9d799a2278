"""Linear layers for few rows on a CPU: y = (W @ x.T).T instead of x @ W.T.

The same product, computed the other way round. On this project's CPU (MKL, AVX2 fp32) the
usual `F.linear` for 2-32 rows is several times slower than for one row, while `W @ x.T`
is not: for the embedded model's LM head (49,152 x 576) 4 rows take 41 ms against 9 ms
(`benchmarks/linear_cost.py`). A verify forward has a few rows, so this makes the drafters'
trees cheaper. Rows above `max_rows` (a prefill) keep `F.linear`. Results agree with
`F.linear` to fp32 rounding; greedy outputs stay exact because vanilla and every drafter run
through the same layers.

With it, one row is the slow case: a one-column product runs on one thread, so on this project's
2-core CPU the embedded model's whole forward at 800 cached tokens takes about 72 ms for one row
and 50 ms for two (benchmarks/README.md, "Under load"). Nothing here works around it: cost.py's
curve times both, and the verifier pads a step to the cheapest row count, vanilla's one-row steps
to two included (pad rows are dropped, the tokens unchanged).
"""
from __future__ import annotations

import types

import torch
import torch.nn.functional as F
from torch import nn

MAX_ROWS = 64


def few_row_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                   max_rows: int = MAX_ROWS) -> torch.Tensor:
    """F.linear(x, weight, bias) for x [.., in], weight [out, in]: computed as (W @ x.T).T when
    x is at most `max_rows` rows on a CPU in the weight's dtype and no gradient is recorded
    (training keeps F.linear)."""
    rows = x.numel() // x.shape[-1]
    if rows > max_rows or x.device.type != "cpu" or x.dtype != weight.dtype or torch.is_grad_enabled():
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1])                                    # [M, in]
    out = torch.matmul(weight, flat.T).T.contiguous()                      # [M, out]
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], out.shape[-1])


class FewRowLinear(nn.Linear):
    """nn.Linear (the same parameters and state dict) whose forward is few_row_linear: for a
    draft head's own layers, which run a few rows a step."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return few_row_linear(x, self.weight, self.bias)


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return few_row_linear(x, self.weight, self.bias, self.few_rows_limit)


def use_few_row_linear(model: nn.Module, max_rows: int = MAX_ROWS) -> int:

    """Switch every nn.Linear of `model` to the few-row form; returns how many."""
    count = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.few_rows_limit = max_rows
            module.forward = types.MethodType(_forward, module)
            count += 1
    return count
