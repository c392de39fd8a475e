"""The method notes' usage: load a model, build a cache factory, generate with SnapKV + KIVI.

    python3 examples/python/generate.py models/snapkv-tiny4.gguf
"""

import sys

import snapkv

model_path = sys.argv[1] if len(sys.argv) > 1 else "models/snapkv-tiny4.gguf"
model = snapkv.load(model_path, threads=2)

intro = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
         "memorize them. I will quiz you about the important information there.\n")
filler = ("Everyone said the castle was small, but the painter thought it was broad. My baker "
          "lifted a strange box from the farmer at the bridge. A scholar and a dusty merchant "
          "noticed 10 shovels inside the mountain. ") * 6
prompt = (intro + filler + "The pass key is 71432. Remember it. 71432 is the pass key. " + filler
          + "\n\nWhat is the pass key? The pass key is")

for method in ["full", "snapkv", "snapkv+kivi2"]:
    make_cache = snapkv.builder(method=method, keep=0.2, window=32)
    out = model.generate(prompt, cache=make_cache, max_tokens=8)
    s = out.stats
    print(f"{method:14s} {out.text!r:22s} kept {s['tokens_kept']}/{s['tokens_seen']} rows, "
          f"KV {s['bytes_stored']} of {s['bytes_full_fp16']} bytes (fp16 full)")
    assert "71432" in out.text, out.text

# Streaming: pieces as they are generated.
for piece in model.generate(prompt, cache=snapkv.builder(method="snapkv+kivi2", keep=0.2),
                            max_tokens=8, stream=True):
    print(piece, end="", flush=True)
print()
