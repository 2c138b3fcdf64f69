"""The Qwen3.5 text model and its MTP head in PyTorch: the training-side forward.

This is a second, independent implementation of the architecture (the C
engine is the first), written to be read next to the spec: §3 for the target
(zero-centred RMSNorm, gated attention with partial RoPE, Gated DeltaNet,
SwiGLU), §5 for the MTP head. Parameter names are the HF checkpoint names
(spec §2.1, §2.3), so export is a rename-free walk over state_dict().

Everything runs in the dtype of the parameters (float32 for training,
float64 for the golden files). Shapes: B batch, T tokens, H hidden.
"""

import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    vocab_size: int
    hidden_size: int = 256
    num_hidden_layers: int = 8
    intermediate_size: int = 768
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    linear_num_key_heads: int = 4
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 64
    linear_value_head_dim: int = 64
    linear_conv_kernel_dim: int = 4
    full_attention_interval: int = 4
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e7
    partial_rotary_factor: float = 0.25

    def layer_types(self):
        return ["full_attention" if (i + 1) % self.full_attention_interval == 0 else "linear_attention"
                for i in range(self.num_hidden_layers)]

    def to_dict(self):
        return asdict(self)


# --- norms (spec §3.2) -------------------------------------------------------

class ZeroCenteredRMSNorm(nn.Module):
    """rmsnorm0(x; w) = x / sqrt(mean(x^2) + eps) * (1 + w); w starts at 0."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def l2norm(x, eps=1e-6):
    """l2n(x) = x / sqrt(sum(x^2) + 1e-6), per head (spec §3.2)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


# --- partial rotary embedding (spec §3.5 step 4) ----------------------------

def apply_rope(x, positions, rotary_dim, theta):
    """Rotate the first rotary_dim dims of every head, rotate_half pairing
    (dim m with dim m + rotary_dim/2). x: [B, T, heads, hd]; positions: [T]."""
    half = rotary_dim // 2
    m = torch.arange(half, dtype=x.dtype)
    inv_freq = theta ** (-2.0 * m / rotary_dim)
    angle = positions.to(x.dtype)[:, None] * inv_freq[None, :]          # [T, half]
    cos, sin = angle.cos()[None, :, None, :], angle.sin()[None, :, None, :]
    a, b, rest = x[..., :half], x[..., half:rotary_dim], x[..., rotary_dim:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], dim=-1)


# --- gated full attention (spec §3.5) ----------------------------------------

class GatedAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.nkv, self.hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        self.rotary_dim = int(c.head_dim * c.partial_rotary_factor)
        self.theta = c.rope_theta
        H = c.hidden_size
        self.q_proj = nn.Linear(H, 2 * self.nh * self.hd, bias=False)   # per head: [query | gate]
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        self.q_norm = ZeroCenteredRMSNorm(self.hd, c.rms_norm_eps)
        self.k_norm = ZeroCenteredRMSNorm(self.hd, c.rms_norm_eps)

    def project(self, x, positions):
        """Queries, gates, keys and values of x ([B, T, H]) at the given
        positions, keys and queries normed and rotated: [B, T, heads, hd]."""
        B, T, _ = x.shape
        qg = self.q_proj(x).view(B, T, self.nh, 2 * self.hd)
        q, gate = qg[..., :self.hd], qg[..., self.hd:]
        k = self.k_proj(x).view(B, T, self.nkv, self.hd)
        v = self.v_proj(x).view(B, T, self.nkv, self.hd)
        q = apply_rope(self.q_norm(q), positions, self.rotary_dim, self.theta)
        k = apply_rope(self.k_norm(k), positions, self.rotary_dim, self.theta)
        return q, gate, k, v

    def attend(self, q, gate, k, v, mask):
        """softmax(q k^T / sqrt(hd)) v over the keys mask allows ([Tq, Tk],
        True = visible), GQA head h reading kv head h // (nh / nkv), then the
        sigmoid output gate and o_proj."""
        B, Tq = q.shape[0], q.shape[1]
        group = self.nh // self.nkv
        qh = q.transpose(1, 2)                                            # [B, nh, Tq, hd]
        kh = k.transpose(1, 2).repeat_interleave(group, dim=1)            # [B, nh, Tk, hd]
        vh = v.transpose(1, 2).repeat_interleave(group, dim=1)
        scores = (qh @ kh.transpose(-1, -2)) / math.sqrt(self.hd)
        scores = scores.masked_fill(~mask, float("-inf"))
        o = (scores.softmax(-1) @ vh).transpose(1, 2)                     # [B, Tq, nh, hd]
        o = o * torch.sigmoid(gate)
        return self.o_proj(o.reshape(B, Tq, self.nh * self.hd))

    def forward(self, x, positions):
        q, gate, k, v = self.project(x, positions)
        T = x.shape[1]
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        return self.attend(q, gate, k, v, causal)


# --- Gated DeltaNet (spec §3.6) ----------------------------------------------

def gated_delta_recurrent(q, k, v, g, beta, state=None):
    """The recurrence of spec §3.6 step 6, one token at a time. q, k: [B, T,
    Hv, Dk]; v: [B, T, Hv, Dv]; g, beta: [B, T, Hv]. Returns the outputs
    [B, T, Hv, Dv] and the final state S [B, Hv, Dk, Dv]. The plain
    reference for gated_delta_chunked."""
    B, T, Hv, Dk = k.shape
    Dv = v.shape[-1]
    S = torch.zeros(B, Hv, Dk, Dv, dtype=q.dtype) if state is None else state
    out = []
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None]                            # S <- alpha S
        m = torch.einsum("bhdv,bhd->bhv", S, k[:, t])                     # m = S^T k
        delta = beta[:, t][..., None] * (v[:, t] - m)                      # delta = beta (v - m)
        S = S + k[:, t][..., :, None] * delta[..., None, :]                # S += k (x) delta
        out.append(torch.einsum("bhdv,bhd->bhv", S, q[:, t]))              # o = S^T q
    return torch.stack(out, dim=1), S


def gated_delta_chunked(q, k, v, g, beta, chunk=64):
    """The same recurrence, C tokens at a time (the UT / WY form). Within a
    chunk, with G_t = cumulative log decay and S0 the state at its start:
      U = (I + A)^-1 (beta V - beta e^G K S0),  A[t,s] = beta_t e^(G_t-G_s) k_t.k_s (s < t)
      O = e^G Q S0 + ((Q K^T) * e^(G_t-G_s), s <= t) U
      S = e^(G_C) S0 + sum_s e^(G_C-G_s) k_s u_s^T
    which is the per-token loop unrolled (gated_delta_recurrent checks it)."""
    B, T, Hv, Dk = k.shape
    Dv = v.shape[-1]
    pad = (-T) % chunk
    def prep(x):                                   # [B, T, Hv, ...] -> [B, Hv, N, C, ...]
        x = x.transpose(1, 2)
        if pad:
            x = F.pad(x, (0, 0, 0, pad) if x.dim() == 4 else (0, pad))
        return x.reshape(B, Hv, -1, chunk, *x.shape[3:])
    q, k, v, g, beta = prep(q), prep(k), prep(v), prep(g), prep(beta)
    G = g.cumsum(-1)                                                       # [B, Hv, N, C]
    decay = (G[..., :, None] - G[..., None, :])                           # G_t - G_s
    lower = torch.ones(chunk, chunk, dtype=torch.bool).tril()
    strict = lower.clone().fill_diagonal_(False)
    decay = decay.masked_fill(~lower, float("-inf")).exp()                 # e^(G_t-G_s), s <= t
    A = (beta[..., None] * (k @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)
    eye = torch.eye(chunk, dtype=q.dtype)
    Tinv = torch.linalg.solve_triangular(A + eye, eye.expand_as(A), upper=False, unitriangular=True)
    W = Tinv @ (beta[..., None] * v)                                       # (I+A)^-1 beta V
    Kd = Tinv @ (beta[..., None] * G.exp()[..., None] * k)                # (I+A)^-1 beta e^G K
    QK = (q @ k.transpose(-1, -2)) * decay                                 # s <= t only
    S = torch.zeros(B, Hv, Dk, Dv, dtype=q.dtype)
    outs = []
    for n in range(q.shape[2]):
        U = W[:, :, n] - Kd[:, :, n] @ S
        outs.append((q[:, :, n] * G[:, :, n].exp()[..., None]) @ S + QK[:, :, n] @ U)
        Gl = G[:, :, n, -1]
        S = S * Gl.exp()[..., None, None] + \
            (k[:, :, n] * (Gl[..., None] - G[:, :, n]).exp()[..., None]).transpose(-1, -2) @ U
    o = torch.stack(outs, dim=2).reshape(B, Hv, -1, Dv)[:, :, :T]
    return o.transpose(1, 2), S


class GatedDeltaNet(nn.Module):
    def __init__(self, c, chunked=True):
        super().__init__()
        self.hk, self.hv = c.linear_num_key_heads, c.linear_num_value_heads
        self.dk, self.dv = c.linear_key_head_dim, c.linear_value_head_dim
        self.kd, self.vd = self.hk * self.dk, self.hv * self.dv
        self.cd = 2 * self.kd + self.vd
        self.eps = c.rms_norm_eps
        self.chunked = chunked
        H, K = c.hidden_size, c.linear_conv_kernel_dim
        self.in_proj_qkv = nn.Linear(H, self.cd, bias=False)
        self.in_proj_z = nn.Linear(H, self.vd, bias=False)
        self.in_proj_b = nn.Linear(H, self.hv, bias=False)
        self.in_proj_a = nn.Linear(H, self.hv, bias=False)
        self.conv1d = nn.Conv1d(self.cd, self.cd, K, groups=self.cd, padding=K - 1, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(self.hv))
        self.A_log = nn.Parameter(torch.empty(self.hv).uniform_(1.0, 16.0).log())
        self.norm = nn.Module()
        self.norm.weight = nn.Parameter(torch.ones(self.dv))               # plain, not zero-centred
        self.out_proj = nn.Linear(self.vd, H, bias=False)

    def forward(self, x, positions=None):
        B, T, _ = x.shape
        c = self.in_proj_qkv(x)
        # causal depthwise conv: out_t = sum_j w[j] c_{t-K+1+j}, then SiLU (step 2)
        c = F.silu(self.conv1d(c.transpose(1, 2))[..., :T].transpose(1, 2))
        q, k, v = c.split([self.kd, self.kd, self.vd], dim=-1)
        q = l2norm(q.reshape(B, T, self.hk, self.dk)) / math.sqrt(self.dk)   # step 4
        k = l2norm(k.reshape(B, T, self.hk, self.dk))
        v = v.reshape(B, T, self.hv, self.dv)
        r = self.hv // self.hk                                             # v-head j reads k-head j // r
        if r > 1:
            q, k = q.repeat_interleave(r, dim=2), k.repeat_interleave(r, dim=2)
        beta = torch.sigmoid(self.in_proj_b(x))                            # step 5
        g = -self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)
        rule = gated_delta_chunked if self.chunked else gated_delta_recurrent
        o, _ = rule(q, k, v, g, beta)
        # gated RMSNorm per v-head (step 7): norm(o) * w * silu(z)
        z = self.in_proj_z(x).reshape(B, T, self.hv, self.dv)
        y = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.eps) * self.norm.weight * F.silu(z)
        return self.out_proj(y.reshape(B, T, self.vd))


# --- decoder layer, model, MTP head -------------------------------------------

class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """u = h + Mixer(rmsnorm0(h)); h' = u + MLP(rmsnorm0(u))  (spec §3.4)."""

    def __init__(self, c, kind):
        super().__init__()
        self.kind = kind
        self.input_layernorm = ZeroCenteredRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = ZeroCenteredRMSNorm(c.hidden_size, c.rms_norm_eps)
        if kind == "full_attention":
            self.self_attn = GatedAttention(c)
        else:
            self.linear_attn = GatedDeltaNet(c)
        self.mlp = MLP(c)

    def forward(self, h, positions):
        mixer = self.self_attn if self.kind == "full_attention" else self.linear_attn
        u = h + mixer(self.input_layernorm(h), positions)
        return u + self.mlp(self.post_attention_layernorm(u))


class MTPHead(nn.Module):
    """spec §5.1: x = fc([rmsnorm0(embed(y)); rmsnorm0(g)]), one gated
    full-attention decoder layer with its own KV, m = rmsnorm0(x; mtp.norm);
    logits = embed_tokens m (tied)."""

    def __init__(self, c):
        super().__init__()
        H = c.hidden_size
        self.pre_fc_norm_embedding = ZeroCenteredRMSNorm(H, c.rms_norm_eps)
        self.pre_fc_norm_hidden = ZeroCenteredRMSNorm(H, c.rms_norm_eps)
        self.fc = nn.Linear(2 * H, H, bias=False)      # columns [0,H): embedding, [H,2H): hidden
        self.layers = nn.ModuleList([DecoderLayer(c, "full_attention")])
        self.norm = ZeroCenteredRMSNorm(H, c.rms_norm_eps)

    def layer_input(self, emb, hidden):
        return self.fc(torch.cat([self.pre_fc_norm_embedding(emb), self.pre_fc_norm_hidden(hidden)], dim=-1))

    def run(self, x, positions, past=None, mask=None):
        """The MTP decoder layer over rows x at positions; its attention sees
        the rows' own keys plus `past` ((k, v) of earlier rows, prepended) as
        `mask` allows (default: causal over past + rows). Returns the
        post-norm hidden m and the rows' (k, v)."""
        layer = self.layers[0]
        attn = layer.self_attn
        q, gate, k, v = attn.project(layer.input_layernorm(x), positions)
        kk, vv = (k, v) if past is None else (torch.cat([past[0], k], 1), torch.cat([past[1], v], 1))
        if mask is None:
            Tq, Tk = x.shape[1], kk.shape[1]
            mask = torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)
        u = x + attn.attend(q, gate, kk, vv, mask)
        out = u + layer.mlp(layer.post_attention_layernorm(u))
        return self.norm(out), (k, v)


class Qwen35(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c, t) for t in c.layer_types()])
        self.norm = ZeroCenteredRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mtp = MTPHead(c)

    def logits(self, h):
        return h @ self.embed_tokens.weight.t()          # tied lm_head (spec §3.9)

    def hidden(self, tokens):
        """Post-final-norm hidden rows H [B, T, H] of tokens [B, T] from
        position 0 (spec §3.9: these feed both lm_head and the MTP head)."""
        positions = torch.arange(tokens.shape[1])
        h = self.embed_tokens(tokens)
        for layer in self.layers:
            h = layer(h, positions)
        return self.norm(h)

    def mtp_teacher_forced(self, hidden, next_tokens):
        """MTP_p = MTP(token x_{p+1}, hidden H_p, position p) for every row p
        (spec §5.3): predicts x_{p+2}. Returns m [B, T, H] and the layer's
        (k, v), which later draft rows attend to."""
        T = hidden.shape[1]
        x = self.mtp.layer_input(self.embed_tokens(next_tokens), hidden)
        return self.mtp.run(x, torch.arange(T))

    def mtp_second_step(self, m1, kv1, tokens2):
        """The recursive step for every row at once (spec §5.4), as drafting
        sees it: row r takes token x_{r+2} and the step-1 MTP hidden m_r at
        position r + 1, and attends to the step-1 rows 0..r plus itself.
        Predicts x_{r+3}."""
        T = m1.shape[1]
        x = self.mtp.layer_input(self.embed_tokens(tokens2), m1)
        own = torch.eye(T, dtype=torch.bool)
        mask = torch.cat([torch.ones(T, T, dtype=torch.bool).tril(), own], dim=1)
        layer = self.mtp.layers[0]
        attn = layer.self_attn
        q, gate, k, v = attn.project(layer.input_layernorm(x), torch.arange(1, T + 1))
        u = x + attn.attend(q, gate, torch.cat([kv1[0], k], 1), torch.cat([kv1[1], v], 1), mask)
        return self.mtp.norm(u + layer.mlp(layer.post_attention_layernorm(u)))


def count_parameters(model):
    return sum(p.numel() for p in model.parameters())
