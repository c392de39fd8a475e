#!/usr/bin/env python3
"""Architecture x weight-type fixtures quantized by llama.cpp, with llama.cpp's own logits.

For each architecture below this writes a random-weight F32 model in the tensor layout of
llama.cpp's converter (tools/make_arch_fixtures.py builds the weights, vocabulary and keys; width
256 so every matrix takes K-quant blocks), has llama.cpp's `llama-quantize` convert it to each
file type, and writes under tests/model/data/arch_quant/<arch>/:

  <FTYPE>.gguf         the file exactly as llama-quantize wrote it (qwen3: see below)
  <FTYPE>.llamacpp.npy [T + N][V] float32: llama.cpp's logits of the prompt (T tokens) followed by
                       llama.cpp's own greedy continuation (N tokens), F32 K/V cache, CPU backend
                       (tools/llama_cpp_logits.cpp); absent for qwen3
  <FTYPE>.ref.npy      [T + N][V] float64 reference (rounded to f32) of the same token sequence on
                       the weights as llama.cpp's gguf-py dequantizes them from <FTYPE>.gguf
  <FTYPE>.ref_act.npy  the same float64 reference with every weight product's input rounded the
                       way llama.cpp's CPU backend quantizes activations for that weight's type
                       (Q8_0 blocks of 32 for Q8_0 / Q4_0 weights, Q8_K super-blocks of 256 for
                       Q2_K..Q6_K, fp16 for F16): what llama.cpp computes, in float64
  reference.json       the prompt and, per file type: the greedy tokens (llama.cpp's) and their
                       top-1/top-2 margins, max |logit|, and the measured deviations below (one
                       number each, max over all rows and logits)

Measured deviations (the data the C++ test derives its bounds from):
  dev_act   max |ref - ref_act|: the effect of the activation rounding itself;
  dev_flip  max over 8 draws of |ref_act - ref_act'|, ref_act' the same with every product input
            first moved by a relative perturbation of up to 8 eps32: how far a rounding of the
            inputs a few ulps off (which can put an activation on the other side of a rounding
            boundary, one quantization step away) moves the quantized model; large here, because
            these random models (attention logits of gain 2) amplify one flipped step;
  dev_kv16  max |ref - ref_kv16|: K and V rounded to fp16 after RoPE (what our cache stores);
  dev_kv16_act  max |ref_act - ref_act_kv16|: the same rounding of K and V in the model with
            rounded activations, where it also moves activations across rounding boundaries.

The prompt of each architecture is chosen among a few random ones to maximise the number of
greedy steps whose llama.cpp top-1/top-2 margin exceeds twice the q8 bound of the test (so that
the identical-token check has steps to check); the test checks only those steps.

qwen3: the llama.cpp this was run with (Feb 2025) does not know the architecture. Its file is
written as qwen2 (same keys under the qwen2. prefix, plus attention.key_length / value_length),
quantized by llama-quantize (which reads only the hyper-parameters and the tensor names), and
relabelled qwen3 with gguf-py (keys renamed back, tensor bytes copied unchanged). llama.cpp cannot
run it, so only the float64 reference is recorded for qwen3.

Run (llama.cpp built beside the project, never committed):
  python3 tools/make_quant_arch_fixtures.py [--llama-cpp /work/llama.cpp] [--only llama3]
Needs numpy and llama.cpp's gguf-py (found under --llama-cpp). Deterministic for one llama.cpp.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

PROMPT_LEN, N_GREEDY, N_PROMPT_TRIES, N_NOISE_DRAWS = 24, 8, 6, 8
# Relative size of the perturbation of every product input that measures dev_flip: a few ulps,
# the order of the engine's own rounding of those inputs (RMSNorm, SiLU, softmax x V in fp32).
FLIP_NOISE = 8.0 * float(np.finfo(np.float32).eps)
COMMON_FTYPES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q8_0", "Q4_0"]

# Width 256 (K-quant rows), 2 layers, feed-forward 256, 512-token vocabulary; the five common file
# types for the three llama.cpp-runnable architectures, plus Q3_K_M and Q2_K on llama3 and two
# types on qwen3: about 15 MB of files in all (the repository keeps its fixtures under 40 MB).
COMMON = dict(n_layers=2, n_embd=256, n_heads=4, n_ff=256, n_vocab=512, dtype="f32")
SPECS = [
    dict(COMMON, name="llama3", arch="llama", n_kv=2, head_dim=None, n_ctx=2048,
         rope_base=500000.0, rms_eps=1e-5, tied=True, qkv_bias=False, qk_norm=False,
         llama3_rope=dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_ctx=8192),
         linear_scaling=None, seed=41, ftypes=COMMON_FTYPES + ["Q3_K_M", "Q2_K"]),
    dict(COMMON, name="llama2", arch="llama", n_kv=4, head_dim=None, n_ctx=1024,
         rope_base=10000.0, rms_eps=1e-6, tied=False, qkv_bias=False, qk_norm=False,
         llama3_rope=None, linear_scaling=4.0, seed=42, ftypes=COMMON_FTYPES),
    dict(COMMON, name="qwen2", arch="qwen2", n_kv=2, head_dim=None, n_ctx=4096,
         rope_base=1000000.0, rms_eps=1e-6, tied=False, qkv_bias=True, qk_norm=False,
         llama3_rope=None, linear_scaling=None, seed=43, ftypes=COMMON_FTYPES),
    dict(COMMON, name="qwen3", arch="qwen3", n_kv=2, head_dim=128, n_ctx=4096,
         rope_base=1000000.0, rms_eps=1e-6, tied=True, qkv_bias=False, qk_norm=True,
         llama3_rope=None, linear_scaling=None, seed=44, ftypes=["Q4_K_M", "Q8_0"]),
]


def import_gguf(llama_cpp):
    try:
        import sentencepiece  # noqa: F401
    except ImportError:  # gguf-py imports it for vocab helpers this script does not use
        stub = types.ModuleType("sentencepiece")
        stub.SentencePieceProcessor = object
        sys.modules["sentencepiece"] = stub
    sys.path.insert(0, os.path.join(llama_cpp, "gguf-py"))
    import gguf  # noqa: E402
    return gguf


# ---- activation rounding as ggml's CPU backend does it (float64 model of it) -------------------

def act_q8_0(x):
    """Q8_0 blocks of 32: d = amax / 127, q = round(x / d), value q * fp16(d)."""
    b = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(b).max(-1, keepdims=True)
    d = amax / 127.0
    safe = np.where(d > 0, d, 1.0)
    q = np.where(d > 0, np.rint(b / safe), 0.0)
    return (q * d.astype(np.float16).astype(np.float64)).reshape(x.shape)


def act_q8_K(x):
    """Q8_K super-blocks of 256: scale from the value of largest magnitude (its sign kept),
    iscale = -127 / max, q = min(127, round(iscale * x)), value q / iscale."""
    b = x.reshape(x.shape[0], -1, 256)
    idx = np.abs(b).argmax(-1)[..., None]
    mx = np.take_along_axis(b, idx, -1)
    safe = np.where(mx != 0, mx, 1.0)
    iscale = np.where(mx != 0, -127.0 / safe, 0.0)
    q = np.minimum(127.0, np.rint(iscale * b))
    return np.where(mx != 0, q / np.where(iscale != 0, iscale, 1.0), 0.0).reshape(x.shape)


def make_act(types_by_name, gguf, rng=None, noise=0.0):
    """The activation rounding of each product; with rng, each input element is first moved by
    a relative uniform perturbation of up to `noise` (a stand-in for the engine's fp32 rounding)."""
    T = gguf.GGMLQuantizationType
    q8_0_pair = {T.Q8_0, T.Q4_0}
    q8_k_pair = {T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K}

    def act(x, name):
        t = types_by_name[name]
        if rng is not None:
            x = x * (1.0 + rng.uniform(-1.0, 1.0, x.shape) * noise)
        if t in q8_0_pair:
            return act_q8_0(x)
        if t in q8_k_pair:
            return act_q8_K(x)
        if t == T.F16:
            return x.astype(np.float16).astype(np.float64)
        if t == T.F32:
            return x
        raise SystemExit("no activation model for weight type %s of %s" % (t.name, name))
    return act


# ---- files ------------------------------------------------------------------------------------

def read_dequantized(path, gguf):
    """name -> float64 array in GGUF row layout, name -> ggml type."""
    r = gguf.GGUFReader(path)
    w, kinds = {}, {}
    for t in r.tensors:
        shape = [int(n) for n in reversed(t.shape.tolist())]  # ggml ne reversed: [rows][cols]
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        w[t.name] = np.asarray(values, dtype=np.float64).reshape(shape)
        kinds[t.name] = t.tensor_type
    return w, kinds


def relabel_qwen3(src_path, dst_path, gguf):
    """The qwen2-labelled quantized file as qwen3: keys renamed, tensor bytes copied."""
    r = gguf.GGUFReader(src_path)
    w = gguf.GGUFWriter(dst_path, "qwen3")
    for key, field in r.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "general.alignment"):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(field.parts[i]).decode("utf-8") for i in field.data]
            else:
                val = [field.parts[i][0].item() for i in field.data]
            w.add_key_value(key.replace("qwen2.", "qwen3.", 1), val, vtype)
            continue
        if vtype == gguf.GGUFValueType.STRING:
            val = bytes(field.parts[field.data[0]]).decode("utf-8")
        else:
            val = field.parts[field.data[0]][0].item()
        w.add_key_value(key.replace("qwen2.", "qwen3.", 1), val, vtype)
    for t in r.tensors:
        w.add_tensor(t.name, np.ascontiguousarray(t.data), raw_shape=t.data.shape,
                     raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def run_llama_cpp(exe, model, prompt, work):
    raw = os.path.join(work, "logits.f32")
    cmd = [exe, model, raw, str(N_GREEDY)] + [str(t) for t in prompt]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit("llama.cpp failed on %s: %s" % (model, r.stderr.strip()))
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return np.fromfile(raw, dtype=np.float32).reshape(-1, out["n_vocab"]), out["greedy"]


def margins(rows):
    top = np.sort(rows, axis=-1)[:, -2:]
    return top[:, 1] - top[:, 0]


# ---- one architecture -------------------------------------------------------------------------

def evaluate(spec, mk, w64, kinds, seq, gguf):
    """float64 reference of seq, the reference with rounded activations, and the measured
    deviations (see the module docstring)."""
    ref = mk.forward(spec, w64, seq)
    ref_act = mk.forward(spec, w64, seq, act=make_act(kinds, gguf))
    ref_kv16 = mk.forward(spec, w64, seq, kv16=True)
    ref_act_kv16 = mk.forward(spec, w64, seq, kv16=True, act=make_act(kinds, gguf))
    dev_flip = 0.0
    for draw in range(N_NOISE_DRAWS):
        act = make_act(kinds, gguf, np.random.default_rng(draw), FLIP_NOISE)
        dev_flip = max(dev_flip, float(np.abs(ref_act - mk.forward(spec, w64, seq, act=act)).max()))
    return (ref, ref_act, float(np.abs(ref - ref_act).max()), dev_flip,
            float(np.abs(ref - ref_kv16).max()), float(np.abs(ref_act - ref_act_kv16).max()))


def build(spec, args, gguf, exe, mk):
    out_dir = os.path.join(args.out, spec["name"])
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="snapkv-quant-arch-")
    runnable = spec["arch"] != "qwen3"
    # qwen3 goes through llama-quantize labelled qwen2 (see the module docstring).
    base_spec = dict(spec, arch="qwen2") if not runnable else spec
    base = os.path.join(work, "base-f32.gguf")
    weights = mk.make_weights(spec)
    vocab = mk.make_vocab(spec["n_vocab"], np.random.default_rng(spec["seed"] + 1000))
    mk.write_gguf(base, base_spec, weights, vocab)

    files = {}
    for ftype in spec["ftypes"]:
        dst = os.path.join(out_dir, ftype + ".gguf")
        tmp = dst if runnable else os.path.join(work, ftype + "-qwen2.gguf")
        r = subprocess.run([os.path.join(args.llama_cpp, "build", "bin", "llama-quantize"), base,
                            tmp, ftype, "1"], capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit("llama-quantize %s failed: %s" % (ftype, r.stderr[-2000:]))
        if not runnable:
            relabel_qwen3(tmp, dst, gguf)
        files[ftype] = (dst,) + read_dequantized(dst, gguf)

    hd = mk.head_dim(spec)
    n_dot = max(spec["n_ff"], spec["n_embd"], spec["n_heads"] * hd, PROMPT_LEN + N_GREEDY)
    eps32 = float(np.finfo(np.float32).eps)
    best = None
    for attempt in range(N_PROMPT_TRIES):
        rng = np.random.default_rng(1000 * spec["seed"] + attempt)
        prompt = [1] + [int(t) for t in rng.integers(3, spec["n_vocab"], size=PROMPT_LEN - 1)]
        per_type, robust = {}, []
        for ftype, (path, w64, kinds) in files.items():
            if runnable:
                lc, greedy = run_llama_cpp(exe, path, prompt, work)
            else:  # our own float64 greedy continuation (no llama.cpp for qwen3)
                seq = list(prompt)
                for _ in range(N_GREEDY):
                    seq.append(int(np.argmax(mk.forward(spec, w64, seq)[-1])))
                lc, greedy = None, seq[PROMPT_LEN:]
            seq = prompt + greedy
            ref, ref_act, dev_act, dev_flip, dev_kv16, dev_kv16_act = evaluate(
                spec, mk, w64, kinds, seq, gguf)
            max_abs = float(np.abs(ref).max())
            tol32 = 2.0 * n_dot * eps32 * max_abs
            # The test's bound on |engine (q8 activations) - llama.cpp| for decode rows.
            lc_dev = float(np.abs(lc - ref_act).max()) if lc is not None else 0.0
            bound = 2.0 * dev_flip + 2.0 * dev_kv16_act + tol32 + lc_dev
            m = margins(lc if lc is not None else ref)[PROMPT_LEN - 1:PROMPT_LEN - 1 + N_GREEDY]
            robust.append(int((m > 2.0 * bound).sum()))
            per_type[ftype] = dict(lc=lc, ref=ref, ref_act=ref_act, greedy=greedy,
                                   dev_act=dev_act, dev_flip=dev_flip, dev_kv16=dev_kv16,
                                   dev_kv16_act=dev_kv16_act, max_abs=max_abs, tol32=tol32,
                                   margins=[float(v) for v in m])
        score = (min(robust), sum(robust))
        print("  %s prompt %d: robust greedy steps per type %s" % (spec["name"], attempt, robust))
        if best is None or score > best[0]:
            best = (score, prompt, per_type)
    _, prompt, per_type = best

    info = {"name": spec["name"], "arch": spec["arch"], "prompt": prompt,
            "n_layers": spec["n_layers"], "n_embd": spec["n_embd"], "n_heads": spec["n_heads"],
            "n_kv_heads": spec["n_kv"], "head_dim": hd, "n_ff": spec["n_ff"],
            "n_vocab": spec["n_vocab"], "n_dot_max": int(n_dot), "llama_cpp_ran": runnable,
            "types": {},
            "note": "written by tools/make_quant_arch_fixtures.py; .llamacpp.npy from llama.cpp "
                    "(Feb 2025 source, CPU backend, F32 K/V cache, 1 thread), .ref.npy float64 "
                    "numpy on gguf-py's dequantization of the same file"}
    for ftype, d in per_type.items():
        base_name = os.path.join(out_dir, ftype)
        np.save(base_name + ".ref.npy", np.ascontiguousarray(d["ref"].astype(np.float32)))
        np.save(base_name + ".ref_act.npy", np.ascontiguousarray(d["ref_act"].astype(np.float32)))
        entry = {"greedy": d["greedy"], "greedy_margins": d["margins"], "dev_act": d["dev_act"],
                 "dev_flip": d["dev_flip"], "dev_kv16": d["dev_kv16"],
                 "dev_kv16_act": d["dev_kv16_act"],
                 "max_abs_logit": d["max_abs"]}
        if d["lc"] is not None:
            np.save(base_name + ".llamacpp.npy", np.ascontiguousarray(d["lc"]))
            entry["max_diff_llamacpp_vs_ref"] = float(
                np.abs(d["lc"].astype(np.float64) - d["ref"]).max())
            entry["max_diff_llamacpp_vs_ref_act"] = float(
                np.abs(d["lc"].astype(np.float64) - d["ref_act"]).max())
        info["types"][ftype] = entry
        print("%-7s %-7s dev_act %.3e dev_flip %.3e dev_kv16 %.3e max|logit| %.2f%s  margins %s" % (
            spec["name"], ftype, d["dev_act"], d["dev_flip"], d["dev_kv16"], d["max_abs"],
            "  |llama.cpp - ref| %.3e |llama.cpp - ref_act| %.3e" % (
                entry["max_diff_llamacpp_vs_ref"], entry["max_diff_llamacpp_vs_ref_act"])
            if "max_diff_llamacpp_vs_ref" in entry else "",
            " ".join("%.2f" % v for v in d["margins"])))
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(info, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", default="/work/llama.cpp")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "model", "data",
                                                  "arch_quant"))
    ap.add_argument("--work", default="/tmp/snapkv-llama-cpp-logits")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    args.out = os.path.abspath(args.out)
    gguf = import_gguf(args.llama_cpp)
    import make_arch_fixtures as mk  # noqa: E402 (needs gguf importable first)
    import llama_cpp_logits  # noqa: E402
    exe = llama_cpp_logits.compile_dumper(args.llama_cpp, os.path.join(args.llama_cpp, "build"),
                                          args.work)
    only = set(filter(None, args.only.split(",")))
    for spec in SPECS:
        if not only or spec["name"] in only:
            build(spec, args, gguf, exe, mk)


if __name__ == "__main__":
    main()
