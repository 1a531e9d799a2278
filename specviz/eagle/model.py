"""The EAGLE draft head (EAGLE-1/-2) and the EAGLE-3 draft head, in the authors' parameter names.

EAGLE (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty";
the authors' code: github.com/SafeAILab/EAGLE, eagle/model/cnets1.py): one Llama decoder layer
over fc([e(t_{j+1}); f_j]) (`fc` [H, 2H] with a bias; the layer has no input norm:
cnets1.py builds `input_layernorm` only for layers of index > 0) predicts the next feature
f_{j+1}; the target's own LM head turns a feature into tokens (no norm: the feature is the
target's final, post-norm hidden state, which `ea_model.py` reads as `outputs[0]` of the
base model, after its `norm`).

EAGLE-3 (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models
via Training-Time Test"; eagle/model/cnets.py): `fc` [H, 3H] (no bias) fuses the target's
hidden states at three layers (low, mid, high: the inputs to decoder layers 2, L//2 and L-3,
modeling_llama_kv.py), then one decoder layer `midlayer` whose attention reads
[input_layernorm(e(t)); hidden_norm(h)] (2H) with h as the residual; `norm` and its own
`lm_head` over a reduced draft vocabulary give tokens, draft id i being target id
i + d2t[i] (`t2d` marks the target ids the draft vocabulary holds). Drafted rows feed the
layer's own output back as h (not through fc, cnets.py: fc runs only when the input's width
differs from H).

Rows pair a feature with the NEXT token: row j holds (f_j, t_{j+1}) at position j and its
output predicts f_{j+1} (EAGLE) / the token t_{j+2}. `forward` runs rows with an explicit
key/value cache and a boolean visibility mask, for drafting and for training alike.
The embeddings are the target's (frozen, not stored), unless the head carries its own
(`own_embed`: a checkpoint's `embed_tokens.weight` that differs from the target's, which the
authors' loader, `load_state_dict(strict=False)` after the target's, and vLLM use; a head
narrower than its target must carry them). What published heads add, each off unless the
checkpoint's config says so (eagle/checkpoint.py reads it): more decoder layers, biases on the
attention and MLP projections, Qwen3's q/k norms, and vLLM speculators' norms (norm_before_residual,
norm_before_fc, fc_norm, norm_output; speculators models/eagle3/core.py and model_definitions.py).
Its linear layers take the few-row product on a CPU (models/cpu_linear.py) when drafting.
"""
from __future__ import annotations

import json
from pathlib import Path
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import check_choice
from ..models.cpu_linear import FewRowLinear, few_row_linear

if TYPE_CHECKING:
    from transformers import PreTrainedModel

KINDS = ("eagle", "eagle3")
OWN_VOCAB_KINDS = ("eagle3",)          # the kinds with a draft vocabulary (lm_head, d2t / t2d) of their own


@dataclass(frozen=True)
class EagleSpec:
    kind: str                          # "eagle" (EAGLE-1/-2) or "eagle3"
    hidden: int                        # the draft layer's width H
    intermediate: int                  # its MLP width
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int                         # the target's vocabulary
    draft_vocab: int                   # eagle3: the draft vocabulary (eagle: = vocab)
    target_hidden: int                 # the target's hidden size (eagle3's fc reads 3 x this)
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: str = ""             # JSON of the config's rope_scaling ("" none)
    max_positions: int = 2048
    fc_bias: bool = True               # eagle: the authors' config "bias" (default True)
    aux_layers: tuple[int, ...] = field(default_factory=tuple)   # eagle3: inputs to these target layers
    layers: int = 1                    # decoder layers: layer 0 reads fc's output (eagle3: and the
                                       # embedding), each later one is a plain pre-norm Llama layer
    qkv_bias: bool = False             # biases on q/k/v (the authors' `qkv_bias`; Qwen2; Llama's attention_bias)
    o_bias: bool = False               # a bias on o_proj (Llama's and Qwen3's attention_bias)
    mlp_bias: bool = False             # biases on the MLP's projections (Llama's mlp_bias)
    qk_norm: bool = False              # Qwen3 layers: an RMSNorm over each head's q and k (q_norm, k_norm)
    norm_before_residual: bool = False  # eagle3 (speculators): layer 0's residual is hidden_norm(h), not h
    norm_before_fc: bool = False       # eagle3 (speculators): one RMSNorm over the fused features (input_norm)
    fc_norm: bool = False              # eagle3 (speculators, EAGLE 3.1): an RMSNorm per target layer's features
    norm_output: bool = False          # eagle3 (speculators, EAGLE 3.1): the output is normed, and fed back so
    own_embed: bool = False            # the head's own token embeddings `embed_tokens.weight` [vocab, H]

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, KINDS)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["aux_layers"] = list(self.aux_layers)
        return d

    @property
    def feature_width(self) -> int:
        """Width of the target feature a committed row reads: H (eagle) or 3 x H (eagle3)."""
        return self.target_hidden * (len(self.aux_layers) if self.kind == "eagle3" else 1)


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low, mid and high layers for a target of `num_layers` decoder layers: the inputs
    to layers 2, L//2 and L-3 (eagle/model/modeling_llama_kv.py, LlamaModel.forward: the hidden
    state is kept before those layers run), each clamped to 0..L for targets of under 5 layers
    (the tests' tiny ones; L: the last layer's output before the final norm)."""
    return tuple(min(max(i, 0), num_layers) for i in (2, num_layers // 2, num_layers - 3))


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Rope(nn.Module):
    """Rotary embedding as the target family computes it (transformers' Llama rotary embedding,
    with the config's rope_theta and rope_scaling, llama3 scaling included)."""

    def __init__(self, spec: EagleSpec) -> None:
        super().__init__()
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

        scaling = json.loads(spec.rope_scaling) if spec.rope_scaling else None
        # the table depends on head_dim alone; hidden_size = heads x head_dim keeps transformers'
        # config check (hidden size a multiple of the head count) away from a head whose explicit
        # head_dim does not divide its hidden size (the weights' shapes decide those, in load)
        cfg = LlamaConfig(hidden_size=spec.heads * spec.head_dim, num_attention_heads=spec.heads, head_dim=spec.head_dim,
                          rope_theta=spec.rope_theta, rope_scaling=scaling,
                          max_position_embeddings=spec.max_positions)
        self.rope = LlamaRotaryEmbedding(cfg)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions [T] -> cos, sin [T, head_dim] in x's dtype."""
        cos, sin = self.rope(x, positions[None])
        return cos[0].to(x.dtype), sin[0].to(x.dtype)


class Attention(nn.Module):
    def __init__(self, spec: EagleSpec, inputs: int) -> None:
        super().__init__()
        self.spec = spec
        s = spec
        self.q_proj = FewRowLinear(inputs, s.heads * s.head_dim, bias=s.qkv_bias)
        self.k_proj = FewRowLinear(inputs, s.kv_heads * s.head_dim, bias=s.qkv_bias)
        self.v_proj = FewRowLinear(inputs, s.kv_heads * s.head_dim, bias=s.qkv_bias)
        self.o_proj = FewRowLinear(s.heads * s.head_dim, s.hidden, bias=s.o_bias)
        if s.qk_norm:                                   # Qwen3Attention: per head, before the rotation
            self.q_norm = RMSNorm(s.head_dim, s.rms_eps)
            self.k_norm = RMSNorm(s.head_dim, s.rms_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None, visible: torch.Tensor
                ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """x [B, T, in]; cos/sin [T, D]; past (k, v) [B, KV, P, D] or None; visible [T, P+T] bool
        (or [B, T, P+T]). Returns [B, T, H] and this call's (k, v) [B, KV, T, D] (rotated)."""
        s, (b, t, _) = self.spec, x.shape
        q = self.q_proj(x).view(b, t, s.heads, s.head_dim)                          # [B, T, NH, D]
        k = self.k_proj(x).view(b, t, s.kv_heads, s.head_dim)                       # [B, T, KV, D]
        if s.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)                                 # [B, NH|KV, T, D]
        v = self.v_proj(x).view(b, t, s.kv_heads, s.head_dim).transpose(1, 2)       # [B, KV, T, D]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        keys = k if past is None else torch.cat([past[0], k], 2)                     # [B, KV, P+T, D]
        values = v if past is None else torch.cat([past[1], v], 2)
        rep = s.heads // s.kv_heads
        if rep > 1:
            keys, values = keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1)
        mask = visible[None, None] if visible.dim() == 2 else visible[:, None]
        out = nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask)   # [B, NH, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(b, t, s.heads * s.head_dim)), (k, v)


class MLP(nn.Module):
    def __init__(self, spec: EagleSpec) -> None:
        super().__init__()
        self.gate_proj = FewRowLinear(spec.hidden, spec.intermediate, bias=spec.mlp_bias)
        self.up_proj = FewRowLinear(spec.hidden, spec.intermediate, bias=spec.mlp_bias)
        self.down_proj = FewRowLinear(spec.intermediate, spec.hidden, bias=spec.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(nn.Module):
    """Decoder layer `index` of a head. Layer 0: EAGLE's (no input norm, cnets1.py) or EAGLE-3's
    `midlayer` (hidden_norm and input_layernorm, attention over their concatenation, cnets.py;
    speculators' `norm_before_residual`: the normed state is the residual too). Later layers
    (heads of more than one layer: cnets1.py's `layers.{i}`, speculators' and vLLM's) are plain
    pre-norm Llama layers over the previous layer's output."""

    def __init__(self, spec: EagleSpec, index: int = 0) -> None:
        super().__init__()
        self.kind, self.index, self.before_residual = spec.kind, index, spec.norm_before_residual
        if spec.kind == "eagle3" and index == 0:
            self.hidden_norm = RMSNorm(spec.hidden, spec.rms_eps)
        if index > 0 or spec.kind == "eagle3":
            self.input_layernorm = RMSNorm(spec.hidden, spec.rms_eps)
        self.self_attn = Attention(spec, 2 * spec.hidden if spec.kind == "eagle3" and index == 0 else spec.hidden)
        self.post_attention_layernorm = RMSNorm(spec.hidden, spec.rms_eps)
        self.mlp = MLP(spec)

    def forward(self, h: torch.Tensor, emb: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None, visible: torch.Tensor) -> tuple[torch.Tensor, Any]:
        """h [B, T, H] (emb [B, T, H]: layer 0 of EAGLE-3) -> [B, T, H] and the rows' (k, v)."""
        residual = h
        if self.index > 0:
            x = self.input_layernorm(h)
        elif self.kind == "eagle3":
            assert emb is not None
            normed = self.hidden_norm(h)
            if self.before_residual:
                residual = normed
            x = torch.cat([self.input_layernorm(emb), normed], -1)                 # [B, T, 2H]
        else:
            x = h
        a, kv = self.self_attn(x, cos, sin, past, visible)
        h = residual + a
        return h + self.mlp(self.post_attention_layernorm(h)), kv


class EagleDraft(nn.Module):
    """The draft head; the frozen target supplies the embeddings (unless the head has its own)
    and EAGLE's LM head. Parameter names are the authors' (eagle: `fc`, `layers.{i}`; eagle3:
    `fc`, `midlayer` for layer 0, `layers.{i}` for later ones as vLLM names them, `norm`,
    `lm_head`, `d2t`, `t2d`), plus speculators' `input_norm` and `fc_norm.{i}` and the head's own
    `embed_tokens`."""

    def __init__(self, spec: EagleSpec, target: PreTrainedModel) -> None:
        super().__init__()
        self.spec = spec
        if spec.own_embed:
            self.embed_tokens = nn.Embedding(spec.vocab, spec.hidden)
        if spec.kind == "eagle":
            self.fc = FewRowLinear(2 * spec.hidden, spec.hidden, bias=spec.fc_bias)
            self.layers = nn.ModuleList([Layer(spec, i) for i in range(spec.layers)])
        else:
            if spec.norm_before_fc:
                self.input_norm = RMSNorm(spec.feature_width, spec.rms_eps)
            if spec.fc_norm:
                self.fc_norm = nn.ModuleList(RMSNorm(spec.target_hidden, spec.rms_eps) for _ in spec.aux_layers)
            self.fc = FewRowLinear(spec.feature_width, spec.hidden, bias=False)
            self.midlayer = Layer(spec, 0)
            if spec.layers > 1:
                self.layers = nn.ModuleDict({str(i): Layer(spec, i) for i in range(1, spec.layers)})
            self.norm = RMSNorm(spec.hidden, spec.rms_eps)
            self.lm_head = FewRowLinear(spec.hidden, spec.draft_vocab, bias=False)
            self.register_buffer("d2t", torch.zeros(spec.draft_vocab, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(spec.vocab, dtype=torch.bool))
        self.rope = Rope(spec)
        self.__dict__["target"] = target                                  # not a submodule: not saved
        self.folder: Path | None = None     # the checkpoint folder it was read from (eagle/checkpoint.py's load)

    @property
    def stack(self) -> list[Layer]:
        """The decoder layers in order."""
        if self.spec.kind == "eagle":
            return list(self.layers)
        return [self.midlayer, *([self.layers[str(i)] for i in range(1, self.spec.layers)])]

    @property
    def layer(self) -> Layer:
        return self.stack[0]

    def set_draft_vocab(self, ids: torch.Tensor) -> None:
        """eagle3: the draft vocabulary, target ids [K] (draft id i is ids[i])."""
        self.d2t.copy_(ids.to(self.d2t.device) - torch.arange(len(ids), device=self.d2t.device))
        self.t2d.zero_()
        self.t2d[ids.to(self.t2d.device)] = True

    def draft_ids(self) -> torch.Tensor:
        """eagle3: the target id of each draft id [V_d] (eagle: every target id)."""
        idx = torch.arange(self.spec.draft_vocab, device=self.d2t.device if self.spec.kind == "eagle3" else None)
        return self.to_target(idx)

    def with_draft_vocab(self, keep: torch.Tensor) -> "EagleDraft":
        """eagle3: a copy of this head whose draft vocabulary is the target ids `keep` [K] (a subset
        of its own, in any order): the same weights, the lm_head's rows of those tokens only, draft
        ids in ascending target id as the authors' `d2t`. Each kept token's logit is unchanged; the
        draft's softmax runs over the K. A cheaper head to draft with where the K hold most of the
        target's choices (train-eagle --export-vocab)."""
        if self.spec.kind not in OWN_VOCAB_KINDS:
            raise ValueError("draft vocabulary: only an EAGLE-3 head has its own (EAGLE drafts over the target's LM head)")
        ids = self.draft_ids().cpu()                                                # [V_d]
        want = torch.unique(keep.cpu().long())                                      # [K] ascending
        row_of = {int(t): i for i, t in enumerate(ids.tolist())}
        missing = [int(t) for t in want.tolist() if int(t) not in row_of]
        if missing or not len(want):
            raise ValueError(f"draft vocabulary: {len(missing)} of the {len(want)} tokens asked for are not in the "
                             f"head's {self.spec.draft_vocab}-token draft vocabulary" if missing
                             else "draft vocabulary: keep at least one token")
        rows = torch.tensor([row_of[int(t)] for t in want.tolist()])                # [K]
        spec = replace(self.spec, draft_vocab=len(want))
        pruned = EagleDraft(spec, self.target)
        state = {k: v for k, v in self.state_dict().items() if k not in ("lm_head.weight", "d2t", "t2d")}
        missing_keys, _ = pruned.load_state_dict(state, strict=False)
        assert set(missing_keys) <= {"lm_head.weight", "d2t", "t2d"}, missing_keys
        weight = self.lm_head.weight.detach()
        pruned.lm_head.weight.data = weight[rows.to(weight.device)].clone()       # [K, H]
        pruned = pruned.to(device=weight.device, dtype=weight.dtype)
        pruned.set_draft_vocab(want.to(weight.device))
        return pruned.eval()

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        if self.spec.own_embed:
            return self.embed_tokens(ids)
        return self.target.get_input_embeddings()(ids)

    def fuse(self, feats: torch.Tensor) -> torch.Tensor:
        """eagle3: the target's features [.., 3 x target H] -> fc's output [.., H] (speculators'
        norm_before_fc: one norm over them first; fc_norm: one per target layer's part)."""
        if self.spec.norm_before_fc:
            feats = self.input_norm(feats)
        if self.spec.fc_norm:
            parts = feats.chunk(len(self.spec.aux_layers), -1)
            feats = torch.cat([norm(part) for norm, part in zip(self.fc_norm, parts)], -1)
        return self.fc(feats)

    def forward(self, h: torch.Tensor, ids: torch.Tensor, positions: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None,
                visible: torch.Tensor, committed: bool) -> tuple[torch.Tensor, Any]:
        """Rows (h_j, t_{j+1}): h [B, T, F] (committed rows: the target's feature, F = feature
        width; drafted rows: the draft's own output, H), ids [B, T], positions [T]; past: the
        layers' (k, v), each [B, layers x KV, P, D] (layer i's heads at i x KV), or None;
        visible [T, P+T] (or [B, T, P+T]) bool. Returns the output [B, T, H] (predicts the next
        feature / token; norm_output: after the final norm) and the rows' (k, v)."""
        emb = self.embed(ids).to(h.dtype)                                           # [B, T, H]
        if self.spec.kind == "eagle":
            x = self.fc(torch.cat([emb, h], -1))                                    # [B, T, H]
            e = None
        else:
            x = self.fuse(h) if committed else h
            e = emb
        cos, sin = self.rope(x, positions)
        kv_heads, keys, values = self.spec.kv_heads, [], []
        for i, layer in enumerate(self.stack):
            part = None if past is None else (past[0][:, i * kv_heads:(i + 1) * kv_heads],
                                              past[1][:, i * kv_heads:(i + 1) * kv_heads])
            x, (k, v) = layer(x, e if i == 0 else None, cos, sin, part, visible)
            keys.append(k)
            values.append(v)
        if self.spec.kind == "eagle3" and self.spec.norm_output:
            x = self.norm(x)
        if len(keys) == 1:
            return x, (keys[0], values[0])
        return x, (torch.cat(keys, 1), torch.cat(values, 1))

    def logits(self, out: torch.Tensor) -> torch.Tensor:
        """Output [.., H] -> logits over the draft's vocabulary [.., V] (eagle: the target's LM
        head, the whole vocabulary; eagle3: norm (unless norm_output did) then its own lm_head
        over the draft vocabulary)."""
        if self.spec.kind == "eagle":
            return few_row_linear(out, self.target.lm_head.weight.to(out.dtype))
        return self.lm_head(out if self.spec.norm_output else self.norm(out))

    def to_target(self, idx: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary indices -> target token ids."""
        return idx if self.spec.kind == "eagle" else idx + self.d2t[idx]
