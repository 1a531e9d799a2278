"""The GLIDE draft model (Du et al., ICML 2024, "GLIDE with a CAPE"), for Llama-style targets.

Each draft layer m (of L_draft): self-attention over the draft's own sequence -> cross-attention
whose queries attend to the target's cached keys and values of layer L_target - L_draft + m
(its top layers; GQA heads repeated; RoPE on the query only, the cached keys carry theirs)
-> MLP (SwiGLU). Pre-norm residual blocks as in Llama. Token embeddings, the final norm and
the LM head are the frozen target's own (not stored in the checkpoint), so the draft adds only
its layers: 4.2M parameters for SmolLM2-135M (3.5M without cross-attention).

Cross-attention masks (`cross_mask`), the delayed cache:
- inference: the target cache holds the committed tokens before the root (S rows); a query at
  position t sees rows j < min(t, S) (all drafted tokens see the whole committed cache, none
  of their own rows exist yet);
- training: block-wise (block size 5): a query at position t sees rows j < 5 * (t // 5), the
  cache as it was verified when its block (one speculative step) began.
A query that sees no row gets a zero cross-attention output.
`cross_attention=False` removes the sub-layer: the paper's "vanilla drafter" baseline.

Vocabulary shortlist (`vocab` > 0, as in FR-Spec, Zhao et al. 2025): the draft's head is the
target's LM head restricted to the `vocab` most frequent tokens of its training data (ids in
the buffer `vocab_ids`), so training and drafting pay K x H instead of V x H per row; every
other token gets -inf (probability 0), and the target's verify decides as before.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..netkit.shortlist import Shortlisted

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PretrainedConfig


@dataclass(frozen=True)
class GlideSpec:
    """The draft's architecture; everything but n_layers / cross_attention mirrors the target."""
    n_layers: int
    cross_attention: bool
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    target_layers: int
    rms_eps: float
    attention_bias: bool
    mlp_bias: bool
    hidden_act: str
    vocab: int = 0                      # head shortlist size (0: the target's whole vocabulary)

    @staticmethod
    def for_target(config: PretrainedConfig, n_layers: int = 1, cross_attention: bool = True, vocab: int = 0
                   ) -> "GlideSpec":
        heads = int(config.num_attention_heads)
        return GlideSpec(
            n_layers, cross_attention, int(config.hidden_size), heads,
            int(getattr(config, "num_key_value_heads", None) or heads),
            int(getattr(config, "head_dim", None) or config.hidden_size // heads),
            int(config.intermediate_size), int(config.num_hidden_layers), float(config.rms_norm_eps),
            bool(getattr(config, "attention_bias", False)), bool(getattr(config, "mlp_bias", False)),
            str(config.hidden_act), int(vocab))

    def cross_layer(self, m: int) -> int:
        """The target layer whose cache draft layer m reads."""
        return self.target_layers - self.n_layers + m

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """q [B, H, T, D], k/v [B, H_kv, S, D] (GQA: repeated to H), visible [T, S] bool.
    Rows with nothing visible give zeros. Returns [B, H, T, D]."""
    rep = q.shape[1] // k.shape[1]
    if rep > 1:
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    if k.shape[2] == 0:
        return torch.zeros_like(q)
    empty = ~visible.any(-1)                                   # [T]
    mask = visible.clone()
    mask[empty, 0] = True                                      # keep softmax finite; zeroed below
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.device))
    if bool(empty.any()):
        out = out.masked_fill(empty.to(q.device)[None, None, :, None], 0.0)
    return out


def block_cross_mask(length: int, block: int = 5) -> torch.Tensor:
    """Training: [T, T] bool, query t sees target rows j < block * (t // block)."""
    t = torch.arange(length)
    return t[None, :] < (block * (t // block))[:, None]


def inference_cross_mask(start: int, n: int, cached: int) -> torch.Tensor:
    """Inference: [n, S] bool for queries at positions start..start+n-1 over S = `cached`
    committed rows: query t sees rows j < min(t, S)."""
    return positions_cross_mask(torch.arange(start, start + n), cached)


def positions_cross_mask(positions: torch.Tensor, cached: int) -> torch.Tensor:
    """[n, S] bool for queries at the given positions [n] (tree nodes: any order): query t sees
    the committed rows j < min(t, S)."""
    return torch.arange(cached)[None, :] < torch.clamp(positions, max=cached)[:, None]


class GlideLayer(nn.Module):
    def __init__(self, spec: GlideSpec, mlp_config: PretrainedConfig) -> None:
        # transformers' Llama modelling is imported here, when a draft is built, not with this
        # module: the drafter registry (and so every CLI command, --help and its refusals) then
        # loads without it, about 2 s sooner
        from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, apply_rotary_pos_emb

        super().__init__()
        self.spec = spec
        self.rotary = apply_rotary_pos_emb                                  # (q, k, cos, sin) -> (q, k)
        h, d = spec.hidden, spec.head_dim
        self.input_norm = LlamaRMSNorm(h, spec.rms_eps)
        self.q_proj = nn.Linear(h, spec.heads * d, bias=spec.attention_bias)
        self.k_proj = nn.Linear(h, spec.kv_heads * d, bias=spec.attention_bias)
        self.v_proj = nn.Linear(h, spec.kv_heads * d, bias=spec.attention_bias)
        self.o_proj = nn.Linear(spec.heads * d, h, bias=spec.attention_bias)
        if spec.cross_attention:
            self.cross_norm = LlamaRMSNorm(h, spec.rms_eps)
            self.cross_q = nn.Linear(h, spec.heads * d, bias=spec.attention_bias)
            self.cross_o = nn.Linear(spec.heads * d, h, bias=spec.attention_bias)
        self.post_norm = LlamaRMSNorm(h, spec.rms_eps)
        self.mlp = LlamaMLP(mlp_config)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.spec.head_dim).transpose(1, 2)          # [B, n, T, D]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None, self_visible: torch.Tensor,
                cross_kv: tuple[torch.Tensor, torch.Tensor] | None, cross_visible: torch.Tensor | None,
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x [B, T, H]; cos/sin [B, T, D]; past: this layer's own (k, v) [B, H_kv, P, D];
        self_visible [T, P+T]; cross_kv: the target's (k, v) [B, H_kv, S, D]; cross_visible [T, S].
        Returns the new hidden [B, T, H] and the (k, v) including the new rows."""
        s = self.spec
        b, t, _ = x.shape
        h = self.input_norm(x)
        q, k, v = self._heads(self.q_proj(h), s.heads), self._heads(self.k_proj(h), s.kv_heads), \
            self._heads(self.v_proj(h), s.kv_heads)
        q, k = self.rotary(q, k, cos, sin)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        a = attend(q, k, v, self_visible)                                    # [B, H, T, D]
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, -1))
        if s.cross_attention and cross_kv is not None:
            h = self.cross_norm(x)
            cq = self._heads(self.cross_q(h), s.heads)
            cq = cq * cos.unsqueeze(1) + _rotate_half(cq) * sin.unsqueeze(1)  # RoPE on the query only
            c = attend(cq, cross_kv[0], cross_kv[1], cross_visible)
            x = x + self.cross_o(c.transpose(1, 2).reshape(b, t, -1))
        x = x + self.mlp(self.post_norm(x))
        return x, (k, v)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class GlideDraft(Shortlisted, nn.Module):
    """The draft layers; the frozen target supplies embeddings, rotary tables, norm and head."""

    def __init__(self, spec: GlideSpec, target: PreTrainedModel) -> None:
        super().__init__()
        self.spec = spec
        self.layers = nn.ModuleList(GlideLayer(spec, target.config) for _ in range(spec.n_layers))
        self.__dict__["target"] = target          # not a submodule: not trained, not saved
        if spec.vocab:
            self.register_buffer("vocab_ids", torch.arange(spec.vocab))   # [K] set by set_vocab / load
        self._head: torch.Tensor | None = None                           # [K, H] rows of the LM head

    @torch.no_grad()
    def init_from_target(self, layer: int | None = None) -> None:
        """Copy target decoder layer `layer` (None: the layer its cross-attention reads) into
        each draft layer's self-attention, norms and MLP; the cross-attention's norm and query
        projection from the attended layer's, and its output projection zero: the untrained
        glimpse adds nothing, so the draft starts as the vanilla drafter and learns what to
        take from the cache. (With the attended layer's output projection instead, its large
        top-layer outputs swamp the embedding-scale residual: on SmolLM2-135M the draft then
        learned slower than the vanilla drafter.)"""
        tl = self.target.model.layers
        for m, dl in enumerate(self.layers):
            src = tl[self.spec.cross_layer(m) if layer is None else layer]
            top = tl[self.spec.cross_layer(m)]
            dl.input_norm.load_state_dict(src.input_layernorm.state_dict())
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(dl, name).load_state_dict(getattr(src.self_attn, name).state_dict())
            dl.post_norm.load_state_dict(src.post_attention_layernorm.state_dict())
            dl.mlp.load_state_dict(src.mlp.state_dict())
            if self.spec.cross_attention:
                dl.cross_norm.load_state_dict(top.input_layernorm.state_dict())
                dl.cross_q.load_state_dict(top.self_attn.q_proj.state_dict())
                dl.cross_o.weight.zero_()
                if dl.cross_o.bias is not None:
                    dl.cross_o.bias.zero_()

    def hidden(self, ids: torch.Tensor, positions: torch.Tensor,
               past: list[tuple[torch.Tensor, torch.Tensor]] | None, self_visible: torch.Tensor,
               cross: list[tuple[torch.Tensor, torch.Tensor]] | None, cross_visible: torch.Tensor | None,
               ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """ids/positions [B, T] -> final-normed hidden [B, T, H] and each layer's (k, v)."""
        inner = self.target.model
        dev = self.vocab_ids.device if self.spec.vocab else next(self.parameters()).device
        x = inner.embed_tokens(ids).to(dev)          # [B, T, H] (a device-mapped target: to ours)
        cos, sin = (t.to(dev) for t in inner.rotary_emb(x, positions.to(dev)))   # [B, T, D] each
        new = []
        for m, layer in enumerate(self.layers):
            x, kv = layer(x, cos, sin, past[m] if past else None, self_visible,
                          cross[m] if cross else None, cross_visible)
            new.append(kv)
        return inner.norm(x), new

    def head_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, T, H] -> [B, T, K] over the shortlist (K = V, the LM head, without one)."""
        if not self.spec.vocab:
            return self.target.lm_head(hidden)
        if self._head is None or self._head.device != hidden.device or self._head.dtype != hidden.dtype \
                or self.training:
            weight = self.target.lm_head.weight
            self._head = weight[self.vocab_ids.to(weight.device)].to(hidden.device, hidden.dtype)   # [K, H]
        return torch.nn.functional.linear(hidden, self._head)

    def vocab_index(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids -> their index in the shortlist, -100 (cross-entropy's ignore) outside it."""
        if not self.spec.vocab:
            return ids
        where = torch.full((self.target.lm_head.weight.shape[0],), -100, dtype=torch.long, device=ids.device)
        where[self.vocab_ids.to(ids.device)] = torch.arange(self.spec.vocab, device=ids.device)
        return where[ids]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [B, T, H] -> [B, T, V]; tokens outside the shortlist get -inf."""
        short = self.head_logits(hidden)
        if not self.spec.vocab:
            return short
        full = short.new_full((*short.shape[:-1], self.target.lm_head.weight.shape[0]), float("-inf"))
        return full.index_copy_(-1, self.vocab_ids.to(short.device), short)

    def train_forward(self, ids: torch.Tensor, cross: list[tuple[torch.Tensor, torch.Tensor]] | None,
                      block: int = 5) -> torch.Tensor:
        """Training: ids [B, T], cross = the target's (k, v) of the attended layers over the
        same T tokens; causal self-attention, block-wise cross mask. Hidden [B, T, H]."""
        t = ids.shape[1]
        positions = torch.arange(t, device=ids.device)[None].expand(ids.shape[0], t)
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        h, _ = self.hidden(ids, positions, None, causal, cross, block_cross_mask(t, block))
        return h
