"""cpu_linear: the few-row form of nn.Linear computes the same product as F.linear."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specviz.models.cpu_linear import use_few_row_linear


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 24), (1, 5, 24), (2, 3, 24), (7, 24), (1, 80, 24)])
def test_same_product_as_f_linear(shape, bias):
    torch.manual_seed(0)
    layer = nn.Linear(24, 40, bias=bias)
    x = torch.randn(*shape)
    want = F.linear(x, layer.weight, layer.bias)
    assert use_few_row_linear(layer, max_rows=64) == 1
    got = layer(x)
    assert got.shape == want.shape and got.is_contiguous()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    if x.numel() // 24 > 64:                                       # a prefill keeps F.linear itself
        assert torch.equal(got, want)


def test_gradients_flow_and_models_are_switched(tiny_lm_tok):
    layer = nn.Linear(8, 4)
    use_few_row_linear(layer)
    layer(torch.randn(3, 8)).sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is not None
    linears = [m for m in tiny_lm_tok.model.modules() if type(m) is nn.Linear]
    assert linears and all(hasattr(m, "few_rows_limit") for m in linears)   # load_model switched them (CPU)
