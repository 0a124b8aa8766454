#!/usr/bin/env python3
"""The agent's link order (scripts/order-symbols, docs/BENCHMARKS.md "Memory"): reads the callgrind dumps that
`BENCH_ONLY=order` leaves (one per phase of a scripted session) and prints the functions of the agent binary that ran,
one mangled name per line, for lld's --symbol-ordering-file.

Why: the kernel maps file pages around each fault (64 kB), so the RSS of code is the number of 64 kB windows the
touched functions fall in, not their size. Linked in this order, the functions the steady state runs (cached tokens,
status, refresh, the idle release) sit together at the front of .text, and start-up-only code after them.

    python3 Benchmarks/order_symbols.py WORKDIR BINARY > Sources/auth-agent/auth-agent.order
"""
import glob
import os
import re
import sys

# The phases, most important first: a function is listed under the first phase that ran it.
PRIORITY = ["cached-token", "idle-release", "idle-release-2", "flood", "status", "refresh", "single-flight",
            "start-and-sign-in"]


def read_dump(path: str, binary: str) -> tuple[str, dict[str, int]]:
    """(phase label, {function: self cost}) of one dump, functions of `binary` only (the cost is not used for the
    order; it is kept for looking at a profile by hand)."""
    label, objects, names, costs = "end", {}, {}, {}
    current_ob, current_fn = None, None
    for line in open(path, errors="replace"):
        if line.startswith("desc: Trigger:"):
            hint = line.split("Trigger:", 1)[1].strip()
            label = next((p for p in PRIORITY if hint.endswith(p)), "end")
            continue
        if line.startswith(("ob=", "fn=", "cob=", "cfn=", "fl=", "fi=", "fe=", "cfi=", "cfl=")):
            key, _, rest = line.rstrip("\n").partition("=")
            m = re.match(r"\((\d+)\)(?: (.*))?$", rest)
            ident, name = (m.group(1), m.group(2)) if m else (None, rest)
            table = objects if key in ("ob", "cob") else names if key in ("fn", "cfn") else None
            if table is not None and ident is not None:
                if name is not None:
                    table[ident] = name
                name = table.get(ident)
            if key == "ob":
                current_ob = name
            elif key == "fn":
                current_fn = name if current_ob and os.path.realpath(current_ob) == binary else None
                if current_fn:
                    current_fn = re.sub(r"'\d+$", "", current_fn)  # callgrind's recursion depth, not the symbol
            continue
        if current_fn and line[:1].isdigit() or (current_fn and line[:1] in "+-*"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                costs[current_fn] = costs.get(current_fn, 0) + int(parts[1])
    return label, costs


def main():
    work, binary = sys.argv[1], os.path.realpath(sys.argv[2])
    by_phase: dict[str, dict[str, int]] = {}
    for path in glob.glob(os.path.join(work, "callgrind.out*")):
        label, costs = read_dump(path, binary)
        merged = by_phase.setdefault(label, {})
        for fn, cost in costs.items():
            merged[fn] = merged.get(fn, 0) + cost
    seen = set()
    counts = []
    for phase in PRIORITY + ["end"]:
        costs = by_phase.get(phase, {})
        # By name within a phase: membership is what counts for the pages, and the file then changes little
        # from one profile to the next.
        fresh = [fn for fn in sorted(costs) if fn not in seen and not fn.startswith("0x")]
        seen.update(fresh)
        counts.append(f"{phase} {len(fresh)}")
        for fn in fresh:
            print(fn)
    print("order_symbols: " + ", ".join(counts), file=sys.stderr)


if __name__ == "__main__":
    main()
