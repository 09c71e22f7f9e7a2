"""Shorter or longer processes for a Burn A/B? From A/B runs' paired records (A's and B's
results.jsonl of each run): the spread of each pair's log ratio when a process times 1 epoch
(its 2nd) or 2 epochs (the median of its 2nd and 3rd, Kiln's quick default), pooled over the
runs (each run's own mean change taken out), what each design costs per pair, and the smallest
change 30 minutes of pairs would show by a paired t-test at 5% with 80% power (normal
approximation), as docs/burn-ab.md reports them.
Usage: python3 epochs.py A1/results.jsonl B1/results.jsonl [A2 B2 ...]"""
import json, math, statistics as st, sys

def runs(path):
    out = {}
    for line in open(path):
        r = json.loads(line)
        if r["status"] == "ok" and r.get("repeat"):
            out[r["repeat"]["index"]] = r
    return out

designs = [
    ("2 timed epochs (3 epochs, the first warms up: the default)", 0,
     lambda r: st.median([e["seconds"] for e in r["epochs"][1:3]])),
    ("1 timed epoch (2 epochs, the first warms up)", 1, lambda r: r["epochs"][1]["seconds"]),
]
files = sys.argv[1:]
sides = [(runs(files[i]), runs(files[i + 1])) for i in range(0, len(files), 2)]
print(f"{sum(len(set(a) & set(b)) for a, b in sides)} pairs from {len(sides)} runs")
for name, dropped, value in designs:
    squares, df, walls = 0.0, 0, []
    for a, b in sides:
        d = [math.log(value(b[k]) / value(a[k])) for k in sorted(set(a) & set(b))]
        m = st.mean(d)
        squares += sum((x - m) ** 2 for x in d)
        df += len(d) - 1
        # A process one epoch shorter saves that epoch (its evaluation included).
        walls += [r["wall_seconds"] - dropped * st.mean([e["seconds"] for e in r["epochs"][1:3]])
                  for k in set(a) & set(b) for r in (a[k], b[k])]
    sd, wall = math.sqrt(squares / df), st.mean(walls)
    pairs = 30 * 60 / (2 * wall)
    detect = (1.96 + 0.84) * sd / math.sqrt(pairs)
    print(f"- {name}: sd of a pair's log ratio {sd:.4f} ({df} df), {wall:.1f} s a process, "
          f"{pairs:.1f} pairs in 30 min: a change over {100 * (math.exp(detect) - 1):.1f}% would show")
