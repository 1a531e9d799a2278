"""cpu_linear: the few-row form of nn.Linear computes the same product as F.linear, is taken
where it should be (a few rows on a CPU, no gradient) and nowhere else, and the EAGLE heads
draft with it."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from specviz.eagle import checkpoint as eagle_ckpt
from specviz.eagle.model import EagleDraft
from specviz.models.cpu_linear import FewRowLinear, use_few_row_linear


def _refuse_f_linear(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any product that falls back to F.linear raises from here on."""
    def refused(*args: object, **kwargs: object) -> torch.Tensor:
        raise AssertionError("F.linear was called")
    monkeypatch.setattr(F, "linear", refused)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(1, 1, 24), (1, 5, 24), (2, 3, 24), (7, 24), (1, 80, 24)])
def test_same_product_as_f_linear(shape, bias):
    torch.manual_seed(0)
    layer = nn.Linear(24, 40, bias=bias)
    x = torch.randn(*shape)
    want = F.linear(x, layer.weight, layer.bias)
    assert use_few_row_linear(layer, max_rows=64) == 1
    with torch.no_grad():
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


def test_the_few_row_form_only_for_few_rows_without_gradient(monkeypatch):
    layer = nn.Linear(24, 40)
    use_few_row_linear(layer, max_rows=8)
    _refuse_f_linear(monkeypatch)
    with torch.no_grad():
        layer(torch.randn(8, 24))                                  # few rows: (W @ x.T).T
        with pytest.raises(AssertionError, match="F.linear"):
            layer(torch.randn(9, 24))                              # a prefill: F.linear
    with pytest.raises(AssertionError, match="F.linear"):
        layer(torch.randn(2, 24))                                  # training: F.linear


def test_few_row_linear_is_an_nn_linear_with_its_state():
    torch.manual_seed(0)
    plain, few = nn.Linear(24, 40), FewRowLinear(24, 40)
    few.load_state_dict(plain.state_dict())
    assert isinstance(few, nn.Linear) and few.state_dict().keys() == plain.state_dict().keys()
    x = torch.randn(3, 24)
    with torch.no_grad():
        torch.testing.assert_close(few(x), plain(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["eagle", "eagle3"])
def test_eagle_heads_draft_rows_with_the_few_row_form(tiny_lm, monkeypatch, kind):
    """A draft step of either head (its own layers and its LM head: EAGLE's is the target's)
    multiplies a few rows the fast way round on a CPU: F.linear is never called."""
    draft = EagleDraft(eagle_ckpt.spec_for_target(kind, tiny_lm.model, 48), tiny_lm.model).eval()
    width = draft.spec.feature_width if kind == "eagle3" else draft.spec.hidden
    m = 3
    _refuse_f_linear(monkeypatch)
    with torch.inference_mode():
        out, _ = draft(torch.randn(1, m, width), torch.tensor([[1, 2, 3]]), torch.arange(m), None,
                       torch.ones(m, m, dtype=torch.bool).tril(), committed=True)      # [1, m, H]
        logits = draft.logits(out[0])                                                  # [m, V']
    assert logits.shape == (m, tiny_lm.vocab_size if kind == "eagle" else 48)
