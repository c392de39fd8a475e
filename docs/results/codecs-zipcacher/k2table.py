"""The 2K table of README.md. usage (repository root): python3 k2table.py JSON_FOLDER"""
import json, sys
TASKS = ["niah_single", "niah_multikey", "passkey", "niah_multivalue", "niah_multiquery", "vt"]
def means(path, first=None, keep=0.2):
    d = json.load(open(path)); out = {}
    for r in d["results"]:
        if r["task"] not in TASKS: continue
        if not r["keep_independent"] and abs(r["keep"] - keep) > 1e-9: continue
        s = [x for x in r["samples"] if first is None or x["index"] < first]
        o = out.setdefault(r["method"], {"acc": {}, "kv": []})
        o["acc"][r["task"]] = 100.0 * sum(x["score"] for x in s) / len(s)
    for s in d.get("summary", []):
        if s["task"] == "all" and s["method"] in out and (s["keep_independent"] or abs(s["keep"] - keep) < 1e-9):
            out[s["method"]]["kvf"] = s["kv_fraction"]
    return {m: (sum(o["acc"].values()) / len(TASKS), o.get("kvf")) for m, o in out.items() if len(o["acc"]) == 6}
base = means("docs/results/defaults/tasks_2047.json", first=10)
full = base["full"][0]; snap = base["snapkv"][0]
print(f"| full | {full:.2f} | 100% | 100 | | |")
print(f"| snapkv 0.2 | | | | {snap:.2f} | {100*base['snapkv'][1]:.1f} (N=30 run) |")
kv2 = means("docs/results/defaults/tasks_2047.json", first=10)
print(f"| kivi2 | {kv2['kivi2'][0]:.2f} | {100*kv2['kivi2'][0]/full:.1f}% | {100*kv2['kivi2'][1]:.1f} (N=30 run) | {kv2['snapkv+kivi2'][0]:.2f} ({kv2['snapkv+kivi2'][0]-snap:+.2f}) | {100*kv2['snapkv+kivi2'][1]:.1f} (N=30 run) |")
for c, f in [("kivi2r","k2_kivi2r_s3"),("kivi4","k2_kivi4_s3"),("kivi4r","k2_kivi4r_s3"),("kitty","k2_kitty_s3"),("zipcache","k2_z02_s3"),("gear","k2_gear_s3"),("zipcacher","k2_zr32s07_s3")]:
    p = sys.argv[1] + "/" + f + ".json"
    try: m = means(p)
    except FileNotFoundError: print(f"| {c} | not run | | | | |"); continue
    a, k = m[c]; sa, sk = m["snapkv+" + c]
    print(f"| {c} | {a:.2f} | {100*a/full:.1f}% | {100*k:.1f} | {sa:.2f} ({sa-snap:+.2f}) | {100*sk:.1f} |")
