"""Moves a raw export (`snapkv convert`'s input) between machines as f16 parts of <= 15 MiB.

  training/transfer.py pack EXPORT_DIR OUT_DIR      -> OUT_DIR/meta.json, OUT_DIR/w0.bin, w1.bin, ...
  training/transfer.py unpack IN_DIR EXPORT_DIR     -> EXPORT_DIR/{config.json,tokenizer.json,tensors/*.npy}

For a training machine that hands back only a few small files (a lent GPU): the weights are
rounded to f16 on the way (the unpacked .npy files hold those f16 values as f32), which is below
what `snapkv convert --type f16` or `q8_0` rounds away anyway.
"""
import argparse
import glob
import json
import os

import numpy as np

PART_BYTES = 15 << 20


def pack(src, out):
    tensors = os.path.join(src, "tensors")
    names = sorted(f[:-4] for f in os.listdir(tensors) if f.endswith(".npy"))
    index, blob = [], bytearray()
    for name in names:
        a = np.load(os.path.join(tensors, name + ".npy"))
        index.append({"name": name, "shape": list(a.shape), "offset": len(blob)})
        blob += a.astype(np.float16).tobytes()
    with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
        tokenizer = f.read()
    with open(os.path.join(src, "config.json")) as f:
        config = json.load(f)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump({"index": index, "config": config, "tokenizer": tokenizer,
                   "bytes": len(blob)}, f)
    for i in range(0, len(blob), PART_BYTES):
        with open(os.path.join(out, f"w{i // PART_BYTES}.bin"), "wb") as f:
            f.write(blob[i:i + PART_BYTES])
    print(f"packed {len(names)} tensors, {len(blob)} bytes of f16")


def unpack(src, out):
    with open(os.path.join(src, "meta.json")) as f:
        meta = json.load(f)
    parts = sorted(glob.glob(os.path.join(src, "w*.bin")),
                   key=lambda p: int(os.path.basename(p)[1:-4]))
    blob = b"".join(open(p, "rb").read() for p in parts)
    if len(blob) != meta["bytes"]:
        raise SystemExit(f"unpack: {len(blob)} bytes in {len(parts)} parts, meta.json expects "
                         f"{meta['bytes']}: a part is missing or cut short")
    os.makedirs(os.path.join(out, "tensors"), exist_ok=True)
    for e in meta["index"]:
        n = int(np.prod(e["shape"]))
        a = np.frombuffer(blob, dtype=np.float16, count=n, offset=e["offset"]).reshape(e["shape"])
        np.save(os.path.join(out, "tensors", e["name"] + ".npy"), a.astype(np.float32))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(meta["config"], f, indent=1)
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(meta["tokenizer"])
    print(f"unpacked {len(meta['index'])} tensors into {out}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("verb", choices=("pack", "unpack"))
    ap.add_argument("src")
    ap.add_argument("out")
    a = ap.parse_args()
    (pack if a.verb == "pack" else unpack)(a.src, a.out)
