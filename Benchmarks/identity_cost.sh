#!/bin/bash
# What the agent's caller identity costs the kernel, measured on the C floor itself: the plain floor against the same
# floor with the agent's identity system calls (`floor_server ... checks`: SO_PASSCRED with recvmsg for every message,
# and for every connection the system calls of `Caller.identify`, which reads every connection's caller in full:
# the pidfd, /proc/PID/stat, exe, cgroup, root, ns/pid, the replaced-file check), shape by shape, in alternating
# order, ROUNDS times; medians printed.
# No agent, keyring or server is involved: this separates the price of the checks (docs/SECURITY.md, defects 4
# and 5 of issue 21) from the agent's own code in the `scripts/bench` rows.
#
#   Benchmarks/identity_cost.sh [ROUNDS]     (default 5; about 40 s per round)
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-5}
DURATION=${IDENTITY_COST_DURATION:-2}
WORK=$(mktemp -d /tmp/identity-cost.XXXXXX)
FLOOR_PID=
trap '[ -z "$FLOOR_PID" ] || kill "$FLOOR_PID" 2>/dev/null || true; rm -rf "$WORK"' EXIT
gcc -O2 -Wall -o "$WORK/floor_server" Benchmarks/floor_server.c
gcc -O2 -Wall -pthread -IBenchmarks -o "$WORK/loadgen" Benchmarks/loadgen.c
# The line `authctl token work` writes (Benchmarks/record_request.py records it from the real authctl in scripts/bench;
# its length is what matters here) and the size of the agent's reply to it.
REQUEST='{"v":1,"id":1,"op":"token","account":"work","min_valid":0}'
REPLY_BYTES=200

measure() {   # variant, then loadgen's shape arguments; prints "ops/s cpu-us-per-request"
    local variant=$1
    shift
    rm -f "$WORK/floor.sock"
    if [ "$variant" = checks ]; then "$WORK/floor_server" "$WORK/floor.sock" "$REPLY_BYTES" checks &
    else "$WORK/floor_server" "$WORK/floor.sock" "$REPLY_BYTES" & fi
    FLOOR_PID=$!
    until [ -S "$WORK/floor.sock" ]; do sleep 0.01; done
    "$WORK/loadgen" --socket "$WORK/floor.sock" --duration "$DURATION" --request "$REQUEST" --pid "$FLOOR_PID" "$@" \
        | python3 -c 'import json, sys; d = json.loads(sys.stdin.read().splitlines()[-1]); print(d["ops_per_s"], d["server_cpu_us_per_req"])'
    kill "$FLOOR_PID"
    wait "$FLOOR_PID" 2>/dev/null || true
    FLOOR_PID=
}

SHAPES=("--clients 1 --mode persistent" "--clients 1 --mode new" "--clients 64 --mode new"
        "--clients 8 --mode new --processes" "--clients 64 --mode new --processes"
        "--clients 8 --mode persistent" "--clients 64 --mode persistent"
        "--clients 8 --mode persistent --processes" "--clients 64 --mode persistent --processes")
for round in $(seq "$ROUNDS"); do
    for index in "${!SHAPES[@]}"; do
        # The order alternates shape by shape and round by round: what runs second meets a busier machine.
        if [ $(((round + index) % 2)) = 0 ]; then order="plain checks"; else order="checks plain"; fi
        for variant in $order; do
            # shellcheck disable=SC2086
            echo "$index|$variant|$(measure "$variant" ${SHAPES[$index]})" >>"$WORK/results"
        done
    done
done
python3 - "$WORK/results" "${SHAPES[@]}" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    index, variant, figures = line.strip().split("|")
    ops, cpu = map(float, figures.split())
    rows[(int(index), variant)].append((ops, cpu))
print(f"{'shape':<40} {'plain ops/s':>12} {'checks ops/s':>12} {'ratio':>6} {'plain CPU us':>12} {'checks CPU us':>13} {'delta':>6}")
for index, shape in enumerate(sys.argv[2:]):
    plain, checks = rows[(index, "plain")], rows[(index, "checks")]
    if not plain or not checks:
        continue
    ops = [statistics.median(r[0] for r in v) for v in (plain, checks)]
    cpu = [statistics.median(r[1] for r in v) for v in (plain, checks)]
    print(f"{shape:<40} {ops[0]:>12,.0f} {ops[1]:>12,.0f} {ops[1] / ops[0]:>6.2f} {cpu[0]:>12.1f} {cpu[1]:>13.1f} {cpu[1] - cpu[0]:>+6.1f}")
print(f"medians of {len(plain)} rounds per shape; load average now: {' '.join(open('/proc/loadavg').read().split()[:3])}")
EOF
