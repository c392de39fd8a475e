"""Imports an F32 GGUF written by `snapkv convert` back into a train.py checkpoint (the inverse of
`model.export_raw` + `snapkv convert`), so that training can continue from a shipped model whose
torch checkpoint is not kept.

  /usr/bin/python3 training/import_gguf.py --gguf models/snapkv-tiny4.gguf \
      --out training/runs/tiny4-import/ckpt.pt [--tokenizer-json OUT.json] [--check-export DIR]

Writes a checkpoint that `train.py --init` reads: the weights, the model shape and RoPE base from
the GGUF's llama.* keys, step 0, and a fresh AdamW state (the moments are not in the GGUF; the
continuing run's warm-up rebuilds them). `--tokenizer-json` also writes the GGUF's vocabulary in
`make_tokenizer.py`'s tokenizer.json format, to compare with the tokenizer used for training.
`--check-export DIR` re-exports the imported model (`model.export_raw`) to DIR for a round trip
through `snapkv convert`. Only llama models with F32 tensors are read; anything else is an error.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Llama, export_raw  # noqa: E402

# GGUF metadata value types -> struct format (scalars); 8 string, 9 array
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
           11: "<q", 12: "<d"}
GGML_F32 = 0


class Reader:
    def __init__(self, data):
        self.data = data
        self.pos = 0

    def scalar(self, fmt):
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.scalar("<Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype in _SCALAR:
            return self.scalar(_SCALAR[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            etype = self.scalar("<I")
            n = self.scalar("<Q")
            return [self.value(etype) for _ in range(n)]
        raise ValueError(f"[import_gguf] unknown metadata type, got {vtype}, expected 0..12")


def read_gguf(path):
    """(metadata dict, {tensor name: np.ndarray float32 [out][in]})."""
    with open(path, "rb") as f:
        data = f.read()
    r = Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError(f"[import_gguf] {path}: not a GGUF file (magic {data[:4]!r})")
    r.pos = 4
    version = r.scalar("<I")
    if version not in (2, 3):
        raise ValueError(f"[import_gguf] {path}: GGUF version {version}, expected 2 or 3")
    n_tensors = r.scalar("<Q")
    n_kv = r.scalar("<Q")
    meta = {}
    for _ in range(n_kv):
        key = r.string()
        meta[key] = r.value(r.scalar("<I"))
    infos = []
    for _ in range(n_tensors):
        name = r.string()
        n_dims = r.scalar("<I")
        dims = [r.scalar("<Q") for _ in range(n_dims)]
        ttype = r.scalar("<I")
        offset = r.scalar("<Q")
        infos.append((name, dims, ttype, offset))
    align = int(meta.get("general.alignment", 32))
    base = (r.pos + align - 1) // align * align
    tensors = {}
    for name, dims, ttype, offset in infos:
        if ttype != GGML_F32:
            raise ValueError(f"[import_gguf] tensor {name}: ggml type {ttype}, expected 0 (F32); "
                             "convert the model with --type f32")
        n = int(np.prod(dims))
        arr = np.frombuffer(data, dtype="<f4", count=n, offset=base + offset)
        tensors[name] = arr.reshape(list(reversed(dims))).copy()  # ne[0] is the fastest axis
    return meta, tensors


def rope_scale_of(meta):
    """Linear RoPE scaling factor (1 = none), read as the engine reads it: rope.scaling.type
    (default linear) with rope.scaling.factor, else the older rope.scale_linear; 0 means none."""
    kind = meta.get("llama.rope.scaling.type", "linear")
    factor = float(meta.get("llama.rope.scaling.factor", meta.get("llama.rope.scale_linear", 0.0)))
    if kind == "none" or factor == 0.0:
        return 1.0
    if kind != "linear":
        raise ValueError(f"[import_gguf] rope.scaling.type {kind!r}, expected 'none' or 'linear'")
    return factor


def model_from_gguf(meta, tensors):
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ValueError(f"[import_gguf] architecture {arch!r}, expected 'llama'")
    n_embd = int(meta["llama.embedding_length"])
    n_head = int(meta["llama.attention.head_count"])
    cfg = Config(tensors["token_embd.weight"].shape[0], n_embd=n_embd,
                 n_layer=int(meta["llama.block_count"]), n_head=n_head,
                 n_head_kv=int(meta.get("llama.attention.head_count_kv", n_head)),
                 n_ff=int(meta["llama.feed_forward_length"]),
                 context_length=int(meta["llama.context_length"]),
                 rope_base=float(meta.get("llama.rope.freq_base", 10000.0)),
                 rms_eps=float(meta.get("llama.attention.layer_norm_rms_epsilon", 1e-5)),
                 rope_scale=rope_scale_of(meta))
    model = Llama(cfg)
    names = {"tok_embd.weight": "token_embd.weight", "out_norm.weight": "output_norm.weight",
             "output.weight": "output.weight"}
    per_block = {"attn_norm": "attn_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v",
                 "wo": "attn_output", "ffn_norm": "ffn_norm", "w_gate": "ffn_gate",
                 "w_up": "ffn_up", "w_down": "ffn_down"}
    for i in range(cfg.n_layer):
        for mod, gg in per_block.items():
            names[f"blocks.{i}.{mod}.weight"] = f"blk.{i}.{gg}.weight"
    state = model.state_dict()
    used = set()
    for key, gg in names.items():
        if gg not in tensors:
            raise ValueError(f"[import_gguf] tensor {gg} missing from the GGUF")
        t = torch.from_numpy(tensors[gg])
        if tuple(t.shape) != tuple(state[key].shape):
            raise ValueError(f"[import_gguf] tensor {gg}: shape {tuple(t.shape)}, expected "
                             f"{tuple(state[key].shape)}")
        state[key] = t
        used.add(gg)
    extra = sorted(set(tensors) - used)
    if extra:
        raise ValueError(f"[import_gguf] tensors not in the torch model: {', '.join(extra)}")
    model.load_state_dict(state)
    return model, cfg


def tokenizer_json(meta):
    return {"model": meta["tokenizer.ggml.model"], "tokens": meta["tokenizer.ggml.tokens"],
            "scores": meta["tokenizer.ggml.scores"],
            "token_types": meta["tokenizer.ggml.token_type"],
            "bos_id": meta["tokenizer.ggml.bos_token_id"],
            "eos_id": meta["tokenizer.ggml.eos_token_id"],
            "unk_id": meta["tokenizer.ggml.unknown_token_id"],
            "add_bos": bool(meta.get("tokenizer.ggml.add_bos_token", True)),
            "add_space_prefix": bool(meta.get("tokenizer.ggml.add_space_prefix", True))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", required=True, help="checkpoint path (train.py --init reads it)")
    ap.add_argument("--tokenizer-json", default=None)
    ap.add_argument("--check-export", default=None, metavar="DIR")
    args = ap.parse_args()
    meta, tensors = read_gguf(args.gguf)
    model, cfg = model_from_gguf(meta, tensors)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 0,
                "config": cfg.to_dict(), "args": {"gguf": args.gguf}}, args.out)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.gguf}: {meta.get('general.name')} {n_params/1e6:.2f}M params, "
          f"config {cfg.to_dict()} -> {args.out}")
    if args.tokenizer_json or args.check_export:
        tok = tokenizer_json(meta)
        tok_path = args.tokenizer_json or os.path.join(args.check_export, "gguf-tokenizer.json")
        os.makedirs(os.path.dirname(os.path.abspath(tok_path)), exist_ok=True)
        with open(tok_path, "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        if args.check_export:
            export_raw(model, tok_path, args.check_export, meta.get("general.name", "imported"))
            print(f"re-exported to {args.check_export}")


if __name__ == "__main__":
    main()
