#!/usr/bin/env python3
"""Resident memory of a process by mapping (docs/BENCHMARKS.md, "Memory"): /proc/PID/smaps summed per file (or
[heap]/[anon]/[stack]), in kB: Rss, Anonymous, Private_Clean, Shared_Clean, mapping count; then smaps_rollup and the
status lines. Mappings under 64 kB are left out of the table, not of the total.

    python3 Benchmarks/smaps_by_mapping.py PID
"""
import collections, re, sys
pid = sys.argv[1]
rows = collections.defaultdict(lambda: collections.Counter())
name = None
for line in open(f"/proc/{pid}/smaps"):
    m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$", line)
    if m:
        perms, path = m.group(1), m.group(2).strip()
        name = path.rsplit("/", 1)[-1] if path else "[anon]"
        if name.startswith("[stack:"): name = "[stack]"
        rows[name]["maps"] += 1
        continue
    k, _, v = line.partition(":")
    if k in ("Rss", "Anonymous", "Private_Dirty", "Shared_Clean", "Private_Clean", "Pss"):
        rows[name][k] += int(v.split()[0])
tot = collections.Counter()
for r in rows.values(): tot.update(r)
print(f"{'mapping':40} {'Rss':>7} {'Anon':>7} {'PrivCl':>7} {'ShCl':>7} {'maps':>5}")
for n, r in sorted(rows.items(), key=lambda kv: -kv[1]["Rss"]):
    if r["Rss"] < 64: continue
    print(f"{n[:40]:40} {r['Rss']:7} {r['Anonymous']:7} {r['Private_Clean']:7} {r['Shared_Clean']:7} {r['maps']:5}")
print(f"{'TOTAL':40} {tot['Rss']:7} {tot['Anonymous']:7} {tot['Private_Clean']:7} {tot['Shared_Clean']:7} {tot['maps']:5}")
print(open(f"/proc/{pid}/smaps_rollup").read().split("\n", 1)[1])
st = {l.split(":")[0]: l.split(":")[1].strip() for l in open(f"/proc/{pid}/status")}
print("VmRSS", st["VmRSS"], "VmHWM", st["VmHWM"], "Threads", st["Threads"], "RssAnon", st["RssAnon"], "RssFile", st["RssFile"])
