# The measuring half of scripts/bench; runs inside scripts/with-keyring (a real GNOME keyring on a private bus).
# Expects from scripts/bench: ROOT BIN TOOLS WORK SOCK AS1 AS2 AS3 DURATION SPAWN_RUNS. Appends one JSON object per figure
# to $WORK/results.jsonl; Benchmarks/report.py turns them into the table.
set -euo pipefail
R=$WORK/results.jsonl
export XDG_RUNTIME_DIR="$WORK/run" XDG_CONFIG_HOME="$WORK/config"
export BROWSER="$ROOT/Benchmarks/timed-browser" FAKE_BROWSER_PYTHON="$ROOT/.venv/bin/python"
export BENCH_CALLBACK_T0_FILE="$WORK/callback_t0"
say() { printf '== %s\n' "$*" >&2; }
# Every request line below is the one this build's authctl writes for the command named, recorded from it
# (Benchmarks/record_request.py), never a hand-written line: the load is what users' programs send.
recorded() { "$ROOT/.venv/bin/python" "$ROOT/Benchmarks/record_request.py" "$WORK/record.sock" -- "$BIN/authctl" "$@" --socket "$WORK/record.sock"; }
TOKEN_REQ=$(recorded token work)
REFRESH_REQ=$(recorded token work --refresh)
REFRESH_DPOP_REQ=$(recorded token dpop --refresh)
PERSONAL_REQ=$(recorded token personal)
STATUS_REQ=$(recorded status)
# loadgen sends authctl's `token work` line unless a later --request names another.
loadgen() { "$TOOLS/loadgen" --request "$TOKEN_REQ" "$@"; }
emit() { printf '%s\n' "$1" >>"$R"; }
loadavg() { emit "{\"kind\":\"loadavg\",\"at\":\"$1\",\"value\":\"$(cut -d' ' -f1-3 /proc/loadavg)\"}"; }
kb() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }
# CPU time of process $1, every thread's and those that ended (utime + stime of /proc/PID/stat, in clock ticks).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
# The server's own times (ms, comma-separated) of the POST /o/token/ requests in AS1's (or $2's) requests.log after its
# line $1.
token_post_ms() { tail -n +"$(($1 + 1))" "${2:-$AS1}/requests.log" | awk '$1 == "POST" && $2 == "/o/token/" { printf "%s%s", sep, $4; sep = "," }'; }
# loadgen wrapper: a run that reports errors is still recorded (the report flags it); a crash is recorded as such.
load() {
    local target=$1; shift
    local out
    out=$(loadgen "$@") || true
    [ -n "$out" ] || out='{"errors":-1}'
    emit "{\"kind\":\"load\",\"target\":\"$target\",\"round\":${ROUND:-1},\"data\":$out}"
    printf '   %s %s\n' "$target" "$out" >&2
}
tokens_in() { grep -c '^POST /o/token/ ' "$1/requests.log" || true; }
# GetAccessToken over D-Bus, as a desktop program calls it (Benchmarks/dbus_calls.c): on one bus connection, then a
# new connection per call. Recorded like `load` (a failed run is recorded as such).
dbus_load() {   # target, agent pid
    local mode count out
    for mode in persistent new; do
        if [ "$mode" = persistent ]; then count=3000; else count=500; fi
        out=$("$TOOLS/dbus_calls" "$2" "$count" "$mode") || true
        [ -n "$out" ] || out="{\"mode\":\"$mode\",\"errors\":-1}"
        emit "{\"kind\":\"dbus\",\"target\":\"$1\",\"round\":${ROUND:-1},\"data\":$out}"
        printf '   dbus %s %s\n' "$1" "$out" >&2
    done
}

say "starting the release agent"
if [ "${ONLY:-}" = instructions ]; then
    # The agent runs under callgrind. Valgrind 3.19 cannot read the toolchain's DWARF 5, so it runs a copy without debug info (symbols kept).
    objcopy --strip-debug "$BIN/auth-agent" "$WORK/auth-agent"
    # instructions: only what the accept loop runs (every cached-token request is served there), not the timers and
    # idle hooks of the other threads, whose share depends on how long valgrind takes.
    COLLECT=()
    # BENCH_INSTRUCTIONS=agent: every thread (the dispatch, the broker) as well.
    [ "${INSTRUCTIONS_OF:-}" = agent ] || [ "${ONLY:-}" != instructions ] || COLLECT=("--toggle-collect=\$s11AgentServer10AcceptLoopC3run*")
    valgrind --tool=callgrind --demangle=no --dump-instr=no --callgrind-out-file="$WORK/callgrind.out" \
        "${COLLECT[@]}" "$WORK/auth-agent" 2>>"$WORK/agent.log" &
else
    "$BIN/auth-agent" 2>>"$WORK/agent.log" &
fi
AGENT=$!
FLOOR=
# A failed step (set -e) must not leave the agent or the floor server running.
trap 'kill $AGENT $FLOOR 2>/dev/null || true' EXIT
for _ in $(seq 1200); do [ -S "$SOCK" ] && break; sleep 0.05; done
[ -S "$SOCK" ] || { echo "bench: the agent did not start; log:" >&2; cat "$WORK/agent.log" >&2; exit 1; }
sleep 0.5
emit "{\"kind\":\"memory\",\"at\":\"start\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"

say "signing in (scripted browser)"
"$BIN/authctl" login work >/dev/null 2>>"$WORK/authctl.log"
AGENT_B=
if [ -n "${BIN_B:-}" ]; then
    # BENCH_BIN_B: a second build, on its own runtime directory, the same keyring and configuration; its first
    # token request refreshes with the refresh token the sign-in above stored.
    say "starting the second build ($BIN_B)"
    mkdir -m 700 "$WORK/run-b"
    XDG_RUNTIME_DIR="$WORK/run-b" "$BIN_B/auth-agent" 2>>"$WORK/agent-b.log" &
    AGENT_B=$!
    trap 'kill $AGENT $AGENT_B $FLOOR 2>/dev/null || true' EXIT
    SOCK_B=$WORK/run-b/auth-agent/agent.sock
    for _ in $(seq 1200); do [ -S "$SOCK_B" ] && break; sleep 0.05; done
    XDG_RUNTIME_DIR="$WORK/run-b" "$BIN_B/authctl" token work >/dev/null 2>>"$WORK/authctl.log"
    TOKEN_REQ_B=$(BIN=$BIN_B recorded token work)
fi
if [ "${ONLY:-}" = instructions ]; then
    # The accept loop's instructions per cached-token request (callgrind counts user space only, the same for the
    # same binary and inputs however busy the machine is): 1 client, a new connection per request, then one
    # persistent connection, INSTRUCTION_REQUESTS each, after a warm-up of both shapes.
    N=${INSTRUCTION_REQUESTS:-4000}
    phase() { callgrind_control --dump="$1" "$AGENT" >/dev/null; }
    loadgen --socket "$SOCK" --clients 1 --mode new --count 200 --timeout 120 >/dev/null
    loadgen --socket "$SOCK" --clients 1 --mode persistent --count 200 --timeout 120 >/dev/null
    phase warm-up
    loadgen --socket "$SOCK" --clients 1 --mode new --count "$N" --duration 600 --timeout 120 >/dev/null
    phase new
    loadgen --socket "$SOCK" --clients 1 --mode persistent --count "$N" --duration 600 --timeout 120 >/dev/null
    phase persistent
    kill "$AGENT"; wait "$AGENT" || true
    for label in new persistent; do
        file=$(grep -l "^desc: Trigger: dump $label\$" "$WORK"/callgrind.out.* | head -1)
        total=$(awk '/^(summary|totals):/ { print $2; exit }' "$file")
        emit "{\"kind\":\"instructions\",\"mode\":\"$label\",\"requests\":$N,\"instructions\":$total}"
    done
    exit 0
fi
[ "${ONLY:-}" = socket ] || "$BIN/authctl" login personal >/dev/null 2>>"$WORK/authctl.log"

say "login overhead: $LOGINS sign-ins of 'other'"
for _ in $(seq "$LOGINS"); do
    [ "${ONLY:-}" != socket ] || break
    before=$(wc -l <"$AS1/requests.log")
    out=$("$ROOT/.venv/bin/python" "$ROOT/Benchmarks/login_timer.py" "$SOCK" other)
    # The token endpoint's own time: every request the server logged after the browser's last /o/authorize/.
    server_ms=$(tail -n +"$((before + 1))" "$AS1/requests.log" |
        awk '/^GET \/o\/authorize\// { s = 0; n = 0; next } { s += $4; n++ } END { printf "%.3f", s }')
    after_paths=$(tail -n +"$((before + 1))" "$AS1/requests.log" | awk '/^GET \/o\/authorize\// { p = ""; next } { p = p $1 " " $2 " " $3 ";" } END { print p }')
    emit "{\"kind\":\"login\",\"data\":$out,\"server_ms_after_callback\":$server_ms,\"server_requests_after_callback\":\"$after_paths\"}"
    printf '   %s server %s ms (%s)\n' "$out" "$server_ms" "$after_paths" >&2
done

if [ "${ONLY:-}" = login ]; then
    emit "{\"kind\":\"keyring\",\"data\":$("$TOOLS/keyring_time" 30)}"
    kill "$AGENT"; wait "$AGENT" || true
    [ -z "${AGENT_LOG_COPY:-}" ] || cp "$WORK/agent.log" "$AGENT_LOG_COPY"
    exit 0
fi

say "idle memory, 3 accounts signed in: 2 s (the idle hook has run) and a minute without requests"
sleep 2
emit "{\"kind\":\"memory\",\"at\":\"idle-2s\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"
idle_cpu=$(cpu_ticks "$AGENT") idle_s=58
sleep "$idle_s"
emit "{\"kind\":\"memory\",\"at\":\"idle\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"
emit "{\"kind\":\"idle_cpu\",\"seconds\":$idle_s,\"ticks\":$(($(cpu_ticks "$AGENT") - idle_cpu)),\"hz\":$(getconf CLK_TCK)}"
if [ "${ONLY:-}" = memory ]; then
    # The peak's parts, phase by phase, without the rest of the run: HWM reset, 1,000 concurrent cached-token
    # connections, then the flood (5,000 idle connections and 64 flooders, half of them sending status).
    smaps() { python3 "$ROOT/Benchmarks/smaps_by_mapping.py" "$AGENT" >"$WORK/smaps-$1.txt"; }
    smaps idle
    echo 5 >"/proc/$AGENT/clear_refs"
    loadgen --socket "$SOCK" --clients 1000 --mode once --timeout 60 >/dev/null || true
    emit "{\"kind\":\"memory\",\"at\":\"after-burst\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"
    smaps after-burst
    emit "{\"kind\":\"flood\",\"data\":$("$ROOT/.venv/bin/python" "$ROOT/Benchmarks/flood.py" "$SOCK" "$BIN/authctl" "$AGENT")}"
    emit "{\"kind\":\"memory\",\"at\":\"after-flood\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"
    smaps after-flood
    kill "$AGENT"; wait "$AGENT" || true
    exit 0
fi
# What that costs: after slow work, the idle agent unmaps its code pages; the next cached-token request maps the
# pages it runs again. Five times: a slow request (status), idle until the hook has run, then one timed token.
if [ "${ONLY:-}" != socket ]; then
    for _ in 1 2 3 4 5; do
        "$BIN/authctl" status >/dev/null 2>>"$WORK/authctl.log" || true
        sleep 1.6
        emit "{\"kind\":\"spawn\",\"data\":$("$TOOLS/spawntime" --label authctl-after-release 1 "$BIN/authctl" token work)}"
    done
fi

# The floor answers with a line exactly as long as the agent's real token reply.
loadgen --socket "$SOCK" --clients 1 --mode persistent --count 1 >"$WORK/probe.json"
REPLY_BYTES=$("$ROOT/.venv/bin/python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["reply_bytes"])' "$WORK/probe.json")
"$TOOLS/floor_server" "$WORK/floor.sock" "$REPLY_BYTES" &
FLOOR=$!
for _ in $(seq 100); do [ -S "$WORK/floor.sock" ] && break; sleep 0.02; done
REQ_JSON=$("$ROOT/.venv/bin/python" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$TOKEN_REQ")
emit "{\"kind\":\"reply_bytes\",\"value\":$REPLY_BYTES,\"request_bytes\":$((${#TOKEN_REQ} + 1)),\"request\":$REQ_JSON}"

# The peak under load covers the load phases: the kernel's high-water mark is reset here (clear_refs 5), so the
# sign-ins before them do not count; the lifetime peak is reported beside it.
LIFETIME_HWM=$(kb $AGENT VmHWM)
HWM_RESET=false
if echo 5 2>/dev/null >"/proc/$AGENT/clear_refs"; then HWM_RESET=true; fi
emit "{\"kind\":\"memory\",\"at\":\"load-start\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM),\"lifetime_hwm_kb\":$LIFETIME_HWM,\"hwm_reset\":$HWM_RESET}"

loadavg before-load
say "cached token vs floor (${DURATION}s per shape; reply $REPLY_BYTES bytes)"
for sock in "$SOCK" ${AGENT_B:+"$SOCK_B"}; do
    loadgen --socket "$sock" --clients 8 --mode new --duration 0.5 >/dev/null || true          # warm-up
    loadgen --socket "$sock" --clients 8 --mode persistent --duration 0.5 >/dev/null || true   # warm-up
done
# With a second build, each shape measures the floor, then both agents, in an order that alternates shape by shape
# and round by round (what runs second meets a warmer or busier machine; with an even number of shapes, alternating
# by shape alone would give every shape the same order in every round), ROUNDS times. The second build gets its own
# authctl's line.
# The shapes run twice: the clients threads of one load generator (one pid), then each a process of its own (N
# pids, as when N programs run authctl: `--processes`, 8 and 64 clients).
SHAPE=0
for ROUND in $(seq "${ROUNDS:-1}"); do
for procs in "" --processes; do
for clients in 1 8 64; do
    [ -z "$procs" ] || [ "$clients" != 1 ] || continue
    for mode in new persistent; do
        SHAPE=$((SHAPE + 1))
        load "floor${procs:+-processes}" --socket "$WORK/floor.sock" --clients "$clients" --mode "$mode" --duration "$DURATION" --pid "$FLOOR" --label floor $procs
        if [ -n "$AGENT_B" ] && [ $(((SHAPE + ROUND) % 2)) = 0 ]; then
            load "agent-b${procs:+-processes}" --socket "$SOCK_B" --clients "$clients" --mode "$mode" --duration "$DURATION" --pid "$AGENT_B" --label agent-b --request "$TOKEN_REQ_B" $procs
        fi
        PERF=
        if [ -n "${PERF_DIR:-}" ]; then   # BENCH_PERF: a call-graph profile of the agent during this shape
            perf record -q -g -F 2000 -p "$AGENT" -o "$PERF_DIR/agent-$mode-$clients$procs.data" 2>/dev/null &
            PERF=$!
            sleep 0.3
        fi
        load "agent${procs:+-processes}" --socket "$SOCK" --clients "$clients" --mode "$mode" --duration "$DURATION" --pid "$AGENT" --label agent $procs
        if [ -n "$PERF" ]; then kill -INT "$PERF" 2>/dev/null || true; wait "$PERF" || true; fi
        if [ -n "$AGENT_B" ] && [ $(((SHAPE + ROUND) % 2)) = 1 ]; then
            load "agent-b${procs:+-processes}" --socket "$SOCK_B" --clients "$clients" --mode "$mode" --duration "$DURATION" --pid "$AGENT_B" --label agent-b --request "$TOKEN_REQ_B" $procs
        fi
    done
done
done
done
load floor-burst --socket "$WORK/floor.sock" --clients 1000 --mode once --pid "$FLOOR" --label floor
emit "{\"kind\":\"memory\",\"at\":\"floor\",\"rss_kb\":$(kb $FLOOR VmRSS),\"hwm_kb\":$(kb $FLOOR VmHWM)}"
kill "$FLOOR"; wait "$FLOOR" || true
emit "{\"kind\":\"memory\",\"at\":\"after-load\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"
if [ -z "$AGENT_B" ] && { [ -z "${ONLY:-}" ] || [ "${ONLY:-}" = socket ]; }; then
    say "cached token over D-Bus (GetAccessToken; one connection, then a new one per call)"
    dbus_load agent "$AGENT"
fi
if [ "${ONLY:-}" = socket ] && [ -n "$AGENT_B" ]; then
    # With a second build, the refresh overhead A/B as well: 20 forced refreshes on one connection per build and
    # round, in alternating order; the report takes each build's median end-to-end time minus the server's own.
    say "forced refreshes, both builds, $ROUNDS round(s)"
    REFRESH_REQ_B=$(BIN=$BIN_B recorded token work --refresh)
    for ROUND in $(seq "$ROUNDS"); do
        if [ $((ROUND % 2)) = 1 ]; then order="agent agent-b"; else order="agent-b agent"; fi
        for target in $order; do
            if [ "$target" = agent ]; then sock=$SOCK request=$REFRESH_REQ; else sock=$SOCK_B request=$REFRESH_REQ_B; fi
            before=$(wc -l <"$AS1/requests.log")
            out=$(loadgen --socket "$sock" --clients 1 --mode persistent --count 20 --duration 120 --timeout 60 --request "$request") || out='{"errors":-1}'
            server=$(token_post_ms "$before")
            emit "{\"kind\":\"refresh_ab\",\"target\":\"$target\",\"round\":$ROUND,\"data\":$out,\"token_ms\":[$server]}"
        done
    done
    # D-Bus, both builds: only one agent can own the bus name, so each round starts each build alone, in
    # alternating order, and measures it once its idle hook's first run (a second after start-up) is past.
    say "cached token over D-Bus, both builds, $ROUNDS round(s), each agent alone on the bus"
    kill "$AGENT" "$AGENT_B"; wait "$AGENT" "$AGENT_B" || true
    for ROUND in $(seq "$ROUNDS"); do
        if [ $((ROUND % 2)) = 1 ]; then order="agent agent-b"; else order="agent-b agent"; fi
        for target in $order; do
            if [ "$target" = agent ]; then bin=$BIN run=$WORK/run; else bin=$BIN_B run=$WORK/run-b; fi
            XDG_RUNTIME_DIR="$run" "$bin/auth-agent" 2>>"$WORK/agent-$target-dbus.log" &
            AGENT=$!
            for _ in $(seq 200); do "$TOOLS/dbus_calls" "$AGENT" 1 persistent >/dev/null 2>&1 && break; sleep 0.05; done
            sleep 1.5
            dbus_load "$target" "$AGENT"
            kill "$AGENT"; wait "$AGENT" || true
        done
    done
    loadavg end
    exit 0
fi
if [ "${ONLY:-}" = socket ]; then
    loadavg end
    kill "$AGENT"; wait "$AGENT" || true
    exit 0
fi

say "authctl token work as a whole process vs /bin/true ($SPAWN_RUNS runs each)"
emit "{\"kind\":\"spawn\",\"data\":$("$TOOLS/spawntime" --label true "$SPAWN_RUNS" /bin/true)}"
emit "{\"kind\":\"spawn\",\"data\":$("$TOOLS/spawntime" --label authctl "$SPAWN_RUNS" "$BIN/authctl" token work)}"
# The same request through a grant's socket (authctl grant; `--grant` connects there): what a container pays.
"$BIN/authctl" grant bench --account work >/dev/null 2>>"$WORK/authctl.log"
emit "{\"kind\":\"spawn\",\"data\":$("$TOOLS/spawntime" --label authctl-grant "$SPAWN_RUNS" "$BIN/authctl" token work --grant bench)}"
"$BIN/authctl" grant --revoke bench >/dev/null 2>>"$WORK/authctl.log"

say "refresh overhead: 20 forced refreshes of work, then the keyring alone"
before=$(wc -l <"$AS1/requests.log")
load refresh --socket "$SOCK" --clients 1 --mode persistent --count 20 --duration 120 --timeout 60 \
    --request "$REFRESH_REQ"
server=$(token_post_ms "$before")
others=$(tail -n +"$((before + 1))" "$AS1/requests.log" | awk '!($1 == "POST" && $2 == "/o/token/")' | wc -l)
emit "{\"kind\":\"refresh_server\",\"token_ms\":[$server],\"other_requests\":$others}"
# The same with DPoP (RFC 9449), the same server code with its DPoP layer on: the agent signs a proof per request
# (and the server checks it, which its own logged time includes). Alternated with work's in rounds, so the load on
# the machine falls on both alike.
"$BIN/authctl" login dpop >/dev/null 2>>"$WORK/authctl.log"
for round in 1 2 3; do
    for account in work dpop; do
        if [ "$account" = work ]; then req=$REFRESH_REQ dir=$AS1; else req=$REFRESH_DPOP_REQ dir=$AS3; fi
        before=$(wc -l <"$dir/requests.log")
        ROUND=$round load "refresh-ab-$account" --socket "$SOCK" --clients 1 --mode persistent --count 20 --duration 120 \
            --timeout 60 --request "$req"
        emit "{\"kind\":\"refresh_dpop_ab\",\"account\":\"$account\",\"round\":$round,\"token_ms\":[$(token_post_ms "$before" "$dir")]}"
    done
done
# What a minimal HTTP client pays around the same endpoint beyond the time the server logs (waitress, TCP, HTTP):
# 20 refresh-token POSTs with an unknown token (400 invalid_grant), each on a new connection, timed in-process.
before=$(wc -l <"$AS1/requests.log")
client_ms=$("$ROOT/.venv/bin/python" - "$(cat "$AS1/issuer")/token/" <<'PY'
import http.client, sys, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
body = urllib.parse.urlencode({"grant_type": "refresh_token", "refresh_token": "bench-unknown", "client_id": "auth-agent-test"})
out = []
for _ in range(20):
    t0 = time.monotonic()
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("POST", u.path, body, {"Content-Type": "application/x-www-form-urlencoded"})
    c.getresponse().read()
    out.append((time.monotonic() - t0) * 1000)
    c.close()
print(",".join(f"{x:.3f}" for x in out))
PY
)
server=$(token_post_ms "$before")
emit "{\"kind\":\"http_baseline\",\"client_ms\":[$client_ms],\"server_ms\":[$server]}"
emit "{\"kind\":\"keyring\",\"data\":$("$TOOLS/keyring_time" 30)}"
emit "{\"kind\":\"memory\",\"at\":\"after-refresh\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"

say "single flight: 1,000 concurrent requests for personal's expired token"
for _ in $(seq 120); do
    left=$("$BIN/authctl" status --json | "$ROOT/.venv/bin/python" -c '
import json, sys
for a in json.load(sys.stdin)["accounts"]:
    if a["name"] == "personal": print(a.get("access_token_expires_in", -1))')
    [ "$left" -lt 0 ] && break
    sleep 1
done
before=$(tokens_in "$AS2")
load singleflight --socket "$SOCK" --clients 1000 --mode once --timeout 60 \
    --request "$PERSONAL_REQ"
sleep 0.5
emit "{\"kind\":\"singleflight\",\"expired_for_s\":$((-left)),\"token_requests\":$(($(tokens_in "$AS2") - before))}"
emit "{\"kind\":\"memory\",\"at\":\"after-singleflight\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"

say "flood: authctl token work with 5,000 idle connections and 64 flooding clients, and without (20 runs each)"
emit "{\"kind\":\"flood\",\"data\":$("$ROOT/.venv/bin/python" "$ROOT/Benchmarks/flood.py" "$SOCK" "$BIN/authctl" "$AGENT")}"

emit "{\"kind\":\"memory\",\"at\":\"end\",\"rss_kb\":$(kb $AGENT VmRSS),\"hwm_kb\":$(kb $AGENT VmHWM)}"
loadavg end
kill "$AGENT"; wait "$AGENT" || true

# Last, because it fills the keyring: the keyring calls of a refresh in a login keyring that other programs have
# used for years (500 of their items), where every write rewrites the whole file.
say "keyring calls with 500 other items in the login keyring"
emit "{\"kind\":\"keyring_populated\",\"data\":$("$TOOLS/keyring_time" 30 20 500)}"
