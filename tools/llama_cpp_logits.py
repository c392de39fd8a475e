#!/usr/bin/python3
"""Record llama.cpp's own logits for the architecture fixtures (tests/model/data/arch/).

Compiles tools/llama_cpp_logits.cpp by hand against a llama.cpp checkout and build that live
outside this repository (never part of our CMake), runs it on each fixture's model.gguf with the
fixture's prompt and as many greedy steps as the float64 reference, and writes next to it:
  logits_llamacpp.npy  [T + N][V] float32, llama.cpp's logits (F32 K/V cache, no flash attention)
  llamacpp.json        llama.cpp's greedy continuation and the measured max |llama.cpp - float64|
The C++ test compares our engine with these (tests/model/arch_test.cpp); the quantized files of
tests/model/data/arch_quant/ have their own generator (tools/make_quant_arch_fixtures.py), which
reuses compile_dumper below.

Run:  /usr/bin/python3 tools/llama_cpp_logits.py [--llama-cpp /work/llama.cpp]
      [--build /work/llama.cpp/build] [--only llama3,qwen2]
Fixtures whose architecture the llama.cpp build does not know (qwen3 for a Feb 2025 llama.cpp)
are reported and skipped.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "tests", "model", "data", "arch")


def find_lib_dirs(build):
    dirs = set()
    for pattern in ("libllama.so*", "libggml*.so*"):
        for p in glob.glob(os.path.join(build, "**", pattern), recursive=True):
            dirs.add(os.path.dirname(p))
    return sorted(dirs)


def compile_dumper(llama_cpp, build, work):
    os.makedirs(work, exist_ok=True)
    exe = os.path.join(work, "llama_cpp_logits")
    lib_dirs = find_lib_dirs(build)
    if not any(glob.glob(os.path.join(d, "libllama.so*")) for d in lib_dirs):
        raise SystemExit("no libllama.so under %s: build llama.cpp first" % build)
    cmd = ["g++", "-O2", "-std=c++17", os.path.join(HERE, "llama_cpp_logits.cpp"),
           "-I", os.path.join(llama_cpp, "include"), "-I", os.path.join(llama_cpp, "ggml", "include"),
           "-o", exe]
    for d in lib_dirs:
        cmd += ["-L", d, "-Wl,-rpath," + d]
    cmd += ["-lllama", "-lggml", "-lggml-base"]
    subprocess.run(cmd, check=True)
    return exe


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama-cpp", default="/work/llama.cpp")
    ap.add_argument("--build", default=None, help="llama.cpp build dir (default LLAMA_CPP/build)")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--work", default="/tmp/snapkv-llama-cpp-logits")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    build = args.build or os.path.join(args.llama_cpp, "build")
    exe = compile_dumper(args.llama_cpp, build, args.work)
    only = set(filter(None, args.only.split(",")))
    failed = False
    for ref_path in sorted(glob.glob(os.path.join(args.data, "*", "reference.json"))):
        d = os.path.dirname(ref_path)
        name = os.path.basename(d)
        if only and name not in only:
            continue
        with open(ref_path) as f:
            ref = json.load(f)
        raw = os.path.join(args.work, name + ".f32")
        cmd = [exe, os.path.join(d, "model.gguf"), raw, str(len(ref["greedy"]))]
        cmd += [str(t) for t in ref["prompt"]]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print("%-14s skipped: llama.cpp could not run it (%s)" % (
                name, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "rc %d" % r.returncode))
            continue
        out = json.loads(r.stdout.strip().splitlines()[-1])
        V = out["n_vocab"]
        logits = np.fromfile(raw, dtype=np.float32).reshape(-1, V)
        f64 = np.load(os.path.join(d, "logits.npy"))
        if logits.shape != f64.shape:
            print("%-14s shape mismatch %s vs %s" % (name, logits.shape, f64.shape))
            failed = True
            continue
        diff = float(np.abs(logits.astype(np.float64) - f64).max())
        np.save(os.path.join(d, "logits_llamacpp.npy"), np.ascontiguousarray(logits))
        info = {"greedy": out["greedy"], "max_diff_vs_float64": diff,
                "greedy_matches_float64": out["greedy"] == ref["greedy"],
                "llama_cpp": "llama.cpp (Feb 2025 source) CPU backend, F32 K/V cache, no flash "
                             "attention, 1 thread; run by tools/llama_cpp_logits.py"}
        with open(os.path.join(d, "llamacpp.json"), "w") as f:
            json.dump(info, f, indent=1)
        print("%-14s max |llama.cpp - float64| %.3e  greedy %s (float64 %s)" % (
            name, diff, out["greedy"], "same" if info["greedy_matches_float64"] else "DIFFERENT"))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
