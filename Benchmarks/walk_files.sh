#!/usr/bin/env bash
# Which agent source files a refresh and a sign-in run, counted from coverage counters (issue 48's walks).
#
#   Benchmarks/walk_files.sh            # this tree
#   WALK_SCRATCH=/tmp/walk-build Benchmarks/walk_files.sh
#
# Builds the agent with coverage instrumentation in a scratch directory of its own (a few minutes the first time),
# then, against the bench fixture (scripts/bench-cli: a real gnome-keyring, the local authorization server, the
# scripted browser), starts that agent four times, each with its own profile: an idle start and stop, one with
# `authctl login work`, an idle one with the stored sign-in, one with `authctl token work --refresh`. A file counts
# for a phase when one of its functions ran more often than in the idle run before it. Prints the files and modules
# of each walk, with the event reactions (D-Bus signals, notifications, the status line, the proactive loop) apart.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCRATCH=${WALK_SCRATCH:-/tmp/auth-agent-walk-build}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/auth-agent-walk.XXXXXX")
swift build --scratch-path "$SCRATCH" --enable-code-coverage --product auth-agent >&2
swift build --product authctl >&2
AGENT="$SCRATCH/debug/auth-agent" AUTHCTL="$(swift build --show-bin-path)/authctl"
cat >"$OUT/phases.sh" <<PHASES
set -u
stop() { pkill -TERM -f "^$AGENT" || true; for _ in \$(seq 300); do pgrep -f "^$AGENT" >/dev/null || break; sleep 0.1; done; }
start() {
    LLVM_PROFILE_FILE="$OUT/\$1.profraw" "$AGENT" 2>>"$OUT/agent-\$1.log" &
    for _ in \$(seq 600); do "$AUTHCTL" ping >/dev/null 2>&1 && break; sleep 0.1; done
}
"$AUTHCTL" logout work >/dev/null; stop
start idle-empty; sleep 2; stop
start signin; "$AUTHCTL" login work >/dev/null; sleep 1; stop
start idle-signed-in; sleep 2; stop
start refresh; "$AUTHCTL" token work --refresh >/dev/null; sleep 1; stop
PHASES
LLVM_PROFILE_FILE="$OUT/bench-cli.profraw" BENCH_AGENT="$AGENT" BENCH_CLI_RUN="bash $OUT/phases.sh" \
    scripts/bench-cli "$AUTHCTL" >"$OUT/bench-cli.log" 2>&1
TOOLS=$(dirname "$(readlink -f "$(command -v swift)")")
for phase in idle-empty signin idle-signed-in refresh; do
    "$TOOLS/llvm-profdata" merge -o "$OUT/$phase.profdata" "$OUT/$phase.profraw"
    "$TOOLS/llvm-cov" export -format=text -skip-expansions -instr-profile="$OUT/$phase.profdata" "$AGENT" >"$OUT/$phase.json"
done
python3 Benchmarks/walk_files.py "$ROOT/Sources/" "$OUT"
rm -rf "$OUT"
