#!/usr/bin/env python3
"""Resident pages of an executable's own mappings (docs/BENCHMARKS.md, "Memory"), by output section and by where
their bytes come from: the linker map's input archive (libswiftCore.a, ...) or, for SwiftPM objects, "pkg:TARGET".
A page shared by several inputs is split by bytes. Reads /proc/PID/pagemap (present bit; the page-frame numbers
are not needed). Understands gold's and lld's map formats (link with -Xlinker -Map=FILE).

    python3 Benchmarks/pages_by_input.py PID BINARY MAPFILE
"""
import bisect, collections, re, struct, subprocess, sys, os
pid, binary, mapfile = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]
# output sections from readelf
secs = []
for l in subprocess.run(["readelf", "-SW", binary], capture_output=True, text=True).stdout.splitlines():
    m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+([0-9a-f]+)\s+([0-9a-f]+)\s+([0-9a-f]+)", l)
    if m and int(m.group(2), 16):
        secs.append((int(m.group(2), 16), int(m.group(4), 16), m.group(1)))
secs.sort()
# input pieces from the map
pieces = []
pat = re.compile(r"^\s+(?:\S+\s+)?0x([0-9a-f]+)\s+0x([0-9a-f]+)\s+(/\S+|\S+\.o\S*)\s*$")
for l in open(mapfile, errors="replace"):
    m = pat.match(l)
    if m:
        a, s = int(m.group(1), 16), int(m.group(2), 16)
        if a and s:
            f = m.group(3)
            am = re.match(r".*/([^/(]+\.a)\(", f)
            if am: name = am.group(1)
            else: name = "pkg:" + next((c[:-6] for c in f.split("/") if c.endswith(".build")), f.rsplit("/", 1)[-1])
            pieces.append((a, a + s, name))
lldpat = re.compile(r"^\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s{9}(\S.*?):\(")
for l in open(mapfile, errors="replace"):
    m = lldpat.match(l)
    if m:
        a, sz, f = int(m.group(1), 16), int(m.group(2), 16), m.group(3)
        if not (a and sz): continue
        am = re.match(r".*/([^/(]+\.a)\(", f)
        if am: name = am.group(1)
        elif "/.build" in f: name = "pkg:" + next((c[:-6] for c in f.split("/") if c.endswith(".build")), "?")
        else: name = f.rsplit("/", 1)[-1]
        pieces.append((a, a + sz, name))
pieces.sort()
starts = [p[0] for p in pieces]
maps = []
for l in open(f"/proc/{pid}/maps"):
    f = l.split()
    if len(f) >= 6 and os.path.realpath(f[5]) == binary:
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        maps.append((lo, hi, int(f[2], 16), f[1]))
bias = min(m[0] - m[2] for m in maps)
pm = open(f"/proc/{pid}/pagemap", "rb")
bysec = collections.Counter(); bylib = collections.Counter()
for lo, hi, off, perm in maps:
    pm.seek(lo // 4096 * 8)
    want = (hi - lo) // 4096 * 8; data = b""
    while len(data) < want:
        chunk = pm.read(want - len(data))
        if not chunk: break
        data += chunk
    for i in range((hi - lo) // 4096):
        e = struct.unpack_from("<Q", data, i * 8)[0]
        if not (e >> 63) & 1: continue
        va = lo + i * 4096 - bias
        si = bisect.bisect_right([s[0] for s in secs], va) - 1
        sec = secs[si][2] if si >= 0 and va < secs[si][0] + max(secs[si][1], 4096) else "?"
        anon = "" if (e >> 61) & 1 else " anon"
        bysec[sec + anon] += 4
        # the libraries the page's bytes come from (split by bytes)
        pi = bisect.bisect_right(starts, va + 4095)
        owners = collections.Counter()
        j = pi - 1
        while j >= 0 and pieces[j][1] > va - (1 << 20):
            a, b, n = pieces[j]
            ov = min(b, va + 4096) - max(a, va)
            if ov > 0: owners[n] += ov
            if a < va - (1 << 20): break
            j -= 1
        tot = sum(owners.values())
        if not tot: bylib[sec + ":?"] += 4; continue
        for n, ov in owners.items(): bylib[n] += 4 * ov / tot
print("by section (kB):")
for k, v in bysec.most_common(): print(f"  {k:32} {v:8.0f}")
print("by input library (kB, pages split by bytes):")
for k, v in bylib.most_common(): print(f"  {k:40} {v:8.0f}")
