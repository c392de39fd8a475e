"""Llama-architecture decoder in torch, laid out exactly as GGUF/llama.cpp expects it.

RMSNorm, RoPE in llama.cpp's NORM convention (adjacent pairs (x[2i], x[2i+1]) rotated by
pos * base^(-2i/head_dim)), grouped-query attention (query head h reads KV head
h // (n_head / n_head_kv), as ggml's broadcast does), SwiGLU FFN, separate output matrix.
Weights are torch Linear [out][in], which is what the raw export (`export_raw`) writes.
"""
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# Fused causal attention (flash / memory-efficient kernels on a GPU). torch < 2.0 has none; the
# explicit masked softmax below is then the only path, and the one CPU training uses.
sdpa = getattr(F, "scaled_dot_product_attention", None)


class Config:
    def __init__(self, vocab_size, n_embd=128, n_layer=4, n_head=4, n_head_kv=2, n_ff=None,
                 context_length=2048, rope_base=10000.0, rms_eps=1e-5, rope_scale=1.0):
        self.vocab_size = vocab_size
        self.n_embd = n_embd
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_head_kv = n_head_kv
        self.n_ff = n_ff or int(round(8 * n_embd / 3 / 32) * 32)
        self.context_length = context_length
        self.rope_base = rope_base
        self.rms_eps = rms_eps
        self.rope_scale = rope_scale  # linear position interpolation: RoPE sees pos / rope_scale
        assert n_embd % n_head == 0 and n_head % n_head_kv == 0
        self.head_dim = n_embd // n_head

    def to_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):  # [..., n]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq_len, head_dim, base, scale=1.0):
    """cos, sin [seq_len][head_dim/2] for pair i: angle (pos / scale) * base^(-2i/head_dim).
    scale > 1 is linear position interpolation (GGUF rope.scaling.type linear, factor = scale;
    llama.cpp's freq_scale = 1 / scale)."""
    inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    pos = torch.arange(seq_len, dtype=torch.float64) / scale
    ang = pos[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    """x [B][H][T][hd]; rotates adjacent pairs (x[2i], x[2i+1])."""
    x0 = x[..., 0::2]
    x1 = x[..., 1::2]
    r0 = x0 * cos - x1 * sin
    r1 = x0 * sin + x1 * cos
    return torch.stack((r0, r1), dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        hd = c.head_dim
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.wq = nn.Linear(c.n_embd, c.n_head * hd, bias=False)
        self.wk = nn.Linear(c.n_embd, c.n_head_kv * hd, bias=False)
        self.wv = nn.Linear(c.n_embd, c.n_head_kv * hd, bias=False)
        self.wo = nn.Linear(c.n_head * hd, c.n_embd, bias=False)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.w_gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.w_up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.w_down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def forward(self, x, cos, sin, mask):  # x [B][T][n_embd]
        c = self.c
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.wq(h).view(B, T, c.n_head, c.head_dim).transpose(1, 2)
        k = self.wk(h).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        v = self.wv(h).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        rep = c.n_head // c.n_head_kv
        k = k.repeat_interleave(rep, dim=1)  # [B][n_head][T][hd]
        v = v.repeat_interleave(rep, dim=1)
        if mask is None:  # fused causal attention (torch >= 2.0; see Llama.fused_attention)
            # RoPE's fp32 tables promote q and k; under bf16 autocast v stays bf16
            y = sdpa(q.to(v.dtype), k.to(v.dtype), v, is_causal=True)
        else:
            att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim)) + mask
            att = torch.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, c.n_head * c.head_dim)
        x = x + self.wo(y)
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embd = nn.Embedding(c.vocab_size, c.n_embd)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.out_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.output = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02
                if name.endswith("wo.weight") or name.endswith("w_down.weight"):
                    std = 0.02 / math.sqrt(2 * c.n_layer)
                nn.init.normal_(p, mean=0.0, std=std)
        self._rope_cache = {}
        self.fused_attention = False  # True: causal attention through sdpa (needs torch >= 2.0)

    def rope(self, T):
        device = self.tok_embd.weight.device
        if (T, device) not in self._rope_cache:
            cos, sin = rope_tables(T, self.c.head_dim, self.c.rope_base, self.c.rope_scale)
            self._rope_cache[(T, device)] = (cos.to(device), sin.to(device))
        return self._rope_cache[(T, device)]

    def causal_mask(self, T):
        """None when attention is fused (the kernel applies causality), else the additive mask."""
        if self.fused_attention:
            return None
        return torch.full((T, T), float("-inf"), device=self.tok_embd.weight.device).triu(1)

    def forward(self, idx):  # idx [B][T] -> logits [B][T][vocab]
        B, T = idx.shape
        cos, sin = self.rope(T)
        mask = self.causal_mask(T)
        x = self.tok_embd(idx)
        for blk in self.blocks:
            x = blk(x, cos, sin, mask)
        return self.output(self.out_norm(x))


def export_raw(model, tokenizer_json, out_dir, name):
    """Raw export read by `snapkv convert`: config.json, tokenizer.json, tensors/<gguf name>.npy."""
    c = model.c
    os.makedirs(os.path.join(out_dir, "tensors"), exist_ok=True)
    cfg = {"architecture": "llama", "name": name, "context_length": c.context_length,
           "embedding_length": c.n_embd, "block_count": c.n_layer, "feed_forward_length": c.n_ff,
           "head_count": c.n_head, "head_count_kv": c.n_head_kv, "rope_freq_base": c.rope_base,
           "rms_norm_eps": c.rms_eps, "vocab_size": c.vocab_size}
    if c.rope_scale != 1.0:  # written as llama.rope.scaling.type linear / .factor by convert
        cfg["rope_scaling_factor"] = c.rope_scale
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(tokenizer_json, encoding="utf-8") as f:
        tok = f.read()
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok)

    def save(name_, t):
        np.save(os.path.join(out_dir, "tensors", name_ + ".npy"),
                t.detach().float().cpu().numpy().astype(np.float32))

    save("token_embd.weight", model.tok_embd.weight)
    save("output_norm.weight", model.out_norm.weight)
    save("output.weight", model.output.weight)
    for i, b in enumerate(model.blocks):
        p = f"blk.{i}."
        save(p + "attn_norm.weight", b.attn_norm.weight)
        save(p + "attn_q.weight", b.wq.weight)
        save(p + "attn_k.weight", b.wk.weight)
        save(p + "attn_v.weight", b.wv.weight)
        save(p + "attn_output.weight", b.wo.weight)
        save(p + "ffn_norm.weight", b.ffn_norm.weight)
        save(p + "ffn_gate.weight", b.w_gate.weight)
        save(p + "ffn_up.weight", b.w_up.weight)
        save(p + "ffn_down.weight", b.w_down.weight)
