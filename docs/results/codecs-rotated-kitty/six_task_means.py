# Six-task means per method from snapkv eval JSON files; --first N restricts to sample index < N.
import json, sys
TASKS = ["niah_single","niah_multikey","passkey","niah_multivalue","niah_multiquery","vt"]
def cells(j):
    out = []
    def walk(x):
        if isinstance(x, dict):
            if "task" in x and "method" in x and "accuracy" in x: out.append(x)
            else:
                for v in x.values(): walk(v)
        elif isinstance(x, list):
            for v in x: walk(v)
    walk(j); return out
first = None
files = []
for a in sys.argv[1:]:
    if a.startswith("--first="): first = int(a.split("=")[1])
    else: files.append(a)
rows = {}
for f in files:
    j = json.load(open(f))
    for c in cells(j):
        key = (c["method"], c["keep"] if not c.get("keep_independent") else "-")
        if first is not None:
            ss = [s for s in c["samples"] if s["index"] < first]
            acc = 100.0 * sum(s["score"] for s in ss) / len(ss)
            n = len(ss)
        else:
            acc, n = c["accuracy"], c["n"]
        if acc <= 1.0 and "samples" in c and first is None: pass
        rows.setdefault(key, {})[c["task"]] = (acc, n, c.get("kv_fraction"), c.get("mean_kv_bytes"))
for (m, k), t in sorted(rows.items()):
    accs = [t[x][0] for x in TASKS if x in t]
    kv = [t[x][2] for x in TASKS if x in t and t[x][2] is not None]
    print(f"{m:18s} keep {str(k):5s} " + " ".join(f"{t[x][0]:6.1f}" if x in t else "   n/a" for x in TASKS)
          + f"  mean {sum(accs)/len(accs):6.2f}  n={t[TASKS[0]][1] if TASKS[0] in t else '?'}  KV%={100*sum(kv)/len(kv) if kv else float('nan'):.1f}")
