"""The fault soak (issue 47): for a while, several client processes ask the agent for a token over and over while,
one at a time and separated by fault-free gaps, the agent, the keyring or the token endpoint fails; then one report.
Used by test_fault_soak.py (a short run in CI) and scripts/soak (longer runs by hand).

The world: the real agent and authctl, the real gnome-keyring on a private bus, and the Django OAuth Toolkit fixture
issuing 30-second access tokens with rotating refresh tokens; the account's token endpoint points at a FaultProxy
(discovery and everything else go to the server directly).

Load: `clients` threads, each running `authctl token ACCOUNT` as a new process again and again (0.1-0.3 s apart),
each call killed if it takes longer than `call_timeout`.

Faults, in a shuffled order (seeded) that is drawn again each time every kind has had its turn; before each, a
fault-free gap (`gap`, seconds, drawn in that range), then the fault waits for its moment:
  sigkill  the kill -9 soak's cycle: a forced rotating refresh (`authctl token ACCOUNT --refresh`; 7 in 10) or a
           sign-in (`authctl login ACCOUNT`; 3 in 10) is started and the agent is SIGKILLed a random moment into it
           (0-0.25 s, 0-1.2 s); the keyring must hold at most one item for the account; the agent is restarted and a
           forced refresh must work or say login_required. login_required counts as a sign-in lost unless a token
           request the server answered 200 reached it in the 2 s before the kill (the kill landed between the
           server's rotation and the keyring write: inherent, ARCHITECTURE.md); either way the soak signs in again.
           The fault ends once the account serves again.
  sigterm  the agent is stopped with SIGTERM (it must exit 0) and restarted; the fault ends when it answers.
  keyring  gnome-keyring-daemon is SIGKILLed the moment the next token request reaches the server (so the
           refresh's keyring write meets a dead keyring) and started again; the fault ends when the new daemon owns
           org.freedesktop.secrets.
  503, hang, reset
           the token endpoint answers 503 / holds every request without answering / closes every connection at
           once, for 4-10 s, from the next token request on (that request included): each outage meets a refresh,
           the agent's early one 15-18 s before a 30 s token expires, or its retry of one that failed. (With a
           cached token good for 5-8 s more, only a longer outage, or one met by a retry, leaves callers with
           nothing to serve.)
After each fault: the keyring must hold one item for the account (none: a sign-in lost; the soak signs in again).
At the end, a forced refresh must work and the keyring hold one item.

Figures (Report): calls, calls served, calls failed (during a fault / within `grace` s after one ended / later,
or before the first fault), calls over the time limit, the longest call, the longest time from a fault's end to the
next token served and to the last failed call, the token endpoint's request rate during server faults (requests
the proxy saw while the fault lasted), sign-ins lost, the agent's own deaths (it exited when the soak did not kill
it), SIGTERM exits other than 0, two keyring items; per fault kind too. No token value is printed: failed calls are
summarised by exit code and message (numbers replaced by N); tokens that were printed are remembered for the
agent's log canary (Agent.remember).
"""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from conftest import pid_alive, wait_for

KINDS = ("sigkill", "sigterm", "keyring", "503", "hang", "reset")
SERVER_FAULTS = {
    "503": ("canned", (503, "text/html", b"<html><body><h1>503 Service Unavailable</h1></body></html>")),
    "hang": ("hang_before", None),
    "reset": ("drop", None),
}
TOKEN_PATH = "/o/token/"
SERVER_FAULT_SECONDS = (4.0, 10.0)
# How long a fault waits for its moment (the next token request) at most: under load a 30 s token is refreshed at
# least every 15 s, and a failing one retried sooner.
MOMENT_LIMIT = 45
PAUSE = (0.1, 0.3)  # between one client's calls
_SECRETISH = re.compile(r"[A-Za-z0-9._~+=-]{16,}")


@dataclass
class Settings:
    seconds: float = 60.0
    clients: int = 4
    seed: int = 0
    grace: float = 2.0
    call_timeout: float = 15.0
    gap: tuple[float, float] = (2.0, 6.0)
    kinds: tuple[str, ...] = KINDS
    count: int | None = None  # stop after this many faults (None: when `seconds` run out)

    @classmethod
    def from_env(cls, default_seconds: float) -> "Settings":
        """AUTH_AGENT_SOAK_SECONDS (0: no limit, with _COUNT), _CLIENTS, _SEED, _GRACE, _CALL_TIMEOUT, _GAP ("2-6"),
        _FAULTS (comma-separated kinds), _COUNT."""
        env = os.environ.get
        gap = env("AUTH_AGENT_SOAK_GAP", "2-6").split("-")
        kinds = tuple(k.strip() for k in env("AUTH_AGENT_SOAK_FAULTS", ",".join(KINDS)).split(",") if k.strip())
        unknown = set(kinds) - set(KINDS)
        if unknown or not kinds:
            raise ValueError(f"AUTH_AGENT_SOAK_FAULTS: unknown kinds {sorted(unknown)} (known: {', '.join(KINDS)})")
        count = env("AUTH_AGENT_SOAK_COUNT")
        seconds = float(env("AUTH_AGENT_SOAK_SECONDS", str(default_seconds)))
        if seconds <= 0 and not count:
            raise ValueError("AUTH_AGENT_SOAK_SECONDS=0 needs AUTH_AGENT_SOAK_COUNT")
        return cls(seconds=seconds if seconds > 0 else float("inf"),
                   clients=int(env("AUTH_AGENT_SOAK_CLIENTS", "4")),
                   seed=int(env("AUTH_AGENT_SOAK_SEED") or random.randrange(1 << 30)),
                   grace=float(env("AUTH_AGENT_SOAK_GRACE", "2")),
                   call_timeout=float(env("AUTH_AGENT_SOAK_CALL_TIMEOUT", "15")),
                   gap=(float(gap[0]), float(gap[-1])), kinds=kinds, count=int(count) if count else None)


@dataclass
class Call:
    client: int
    start: float
    end: float
    rc: int | None  # None: killed at the time limit
    reason: str = ""


@dataclass
class Fault:
    kind: str
    start: float
    end: float = 0.0
    token_requests: int = 0  # requests that reached the proxy while it lasted (server faults)


@dataclass
class Report:
    settings: Settings
    started: float
    ended: float
    calls: list[Call]
    faults: list[Fault]
    sign_ins_lost: list[str] = field(default_factory=list)
    rotation_window_kills: int = 0
    deaths: list[str] = field(default_factory=list)
    unclean_stops: list[str] = field(default_factory=list)
    two_items: int = 0
    kill_outcomes: dict[str, int] = field(default_factory=dict)
    kill_other: list[str] = field(default_factory=list)  # after a kill, neither a token nor login_required
    end_check: str = ""  # why the forced refresh at the end failed ("": it worked)
    bin_dir: str = ""

    # -- classification

    def _sorted_faults(self) -> list[Fault]:
        return sorted(self.faults, key=lambda f: f.start)

    def place(self, call: Call) -> tuple[str, Fault | None]:
        """("during", fault) if the call overlaps a fault; ("grace", fault) if it started within `grace` s after the
        last fault before it ended; else ("later", that fault or None)."""
        previous = None
        for f in self._sorted_faults():
            if call.start < f.end and call.end > f.start:
                return "during", f
            if f.end <= call.start:
                previous = f
        if previous is not None and call.start - previous.end <= self.settings.grace:
            return "grace", previous
        return "later", previous

    @property
    def failed(self) -> list[Call]:
        return [c for c in self.calls if c.rc != 0]

    @property
    def failed_later(self) -> list[Call]:
        return [c for c in self.failed if self.place(c)[0] == "later"]

    @property
    def over_bound(self) -> list[Call]:
        return [c for c in self.calls if c.rc is None]

    def recovery(self, f: Fault) -> float | None:
        """Seconds from the fault's end to the next token served (a call that succeeded and ended after it)."""
        ends = [c.end for c in self.calls if c.rc == 0 and c.end > f.end]
        return min(ends) - f.end if ends else None

    def last_failure_after(self, f: Fault) -> float:
        """Seconds from the fault's end to the start of the last failed call after it that overlaps no fault."""
        starts = [c.start for c in self.failed for where, after in [self.place(c)] if where != "during" and after is f]
        return max(starts) - f.end if starts else 0.0

    # -- text

    def text(self) -> str:
        s = self.settings
        span = self.ended - self.started
        calls, failed = self.calls, self.failed
        places = [self.place(c) for c in failed]
        during = sum(1 for p, _ in places if p == "during")
        grace = sum(1 for p, _ in places if p == "grace")
        later = self.failed_later
        kinds = {}
        for f in self.faults:
            kinds[f.kind] = kinds.get(f.kind, 0) + 1
        longest = max(calls, key=lambda c: c.end - c.start, default=None)
        recoveries = [(self.recovery(f), f) for f in self.faults]
        worst = max(recoveries, key=lambda r: float("inf") if r[0] is None else r[0], default=(None, None))
        tails = [(self.last_failure_after(f), f) for f in self.faults]
        worst_tail = max(tails, key=lambda t: t[0], default=(0.0, None))
        server = [f for f in self.faults if f.kind in SERVER_FAULTS]
        server_seconds = sum(f.end - f.start for f in server)
        server_requests = sum(f.token_requests for f in server)

        def at(t: float) -> str:
            return f"{t - self.started:.1f} s"

        def rate(requests: int, seconds: float) -> str:
            return f"{requests / seconds:.2f}/s" if seconds > 0 else "-"

        lines = [
            f"fault soak: {span:.0f} s, {s.clients} clients, seed {s.seed}, faults {','.join(s.kinds)}, gaps "
            f"{s.gap[0]:g}-{s.gap[1]:g} s, call limit {s.call_timeout:g} s, grace {s.grace:g} s"
            + (f" ({self.bin_dir})" if self.bin_dir else ""),
            f"  faults:                  {len(self.faults)} (" +
            ", ".join(f"{k} {kinds.get(k, 0)}" for k in s.kinds) + ")",
            f"  calls:                   {len(calls)}, served {len(calls) - len(failed)}, failed {len(failed)} "
            f"(during a fault {during}, within {s.grace:g} s after one ended {grace}, later {len(later)})",
            f"  failed > {s.grace:g} s after a fault ended (or before the first): {len(later)}" +
            (f"  [{self._reasons(later)}]" if later else ""),
            f"  over the {s.call_timeout:g} s limit:    {len(self.over_bound)}",
            "  longest call:            " +
            (f"{longest.end - longest.start:.2f} s (at {at(longest.start)}, exit {longest.rc})" if longest else "-"),
            "  fault end -> next token: longest " +
            ("none before the run ended" if worst[1] is not None and worst[0] is None else
             f"{worst[0]:.2f} s ({worst[1].kind} ending at {at(worst[1].end)})" if worst[1] else "-"),
            "  fault end -> last failed call: longest " +
            (f"{worst_tail[0]:.2f} s ({worst_tail[1].kind} ending at {at(worst_tail[1].end)})"
             if worst_tail[1] is not None and worst_tail[0] > 0 else "0 s"),
            "  token requests during server faults: " +
            (f"{rate(server_requests, server_seconds)} ({server_requests} in {server_seconds:.1f} s; highest "
             f"{max(f.token_requests / (f.end - f.start) for f in server):.2f}/s)" if server else "no server faults"),
            f"  sign-ins lost:           {len(self.sign_ins_lost)}" +
            (f"  [{'; '.join(self.sign_ins_lost)}]" if self.sign_ins_lost else "") +
            f" (kills in the rotation window, signed in again: {self.rotation_window_kills})",
            f"  agent deaths:            {len(self.deaths)}" + (f"  [{'; '.join(self.deaths)}]" if self.deaths else ""),
            f"  SIGTERM exits not 0:     {len(self.unclean_stops)}" +
            (f"  [{'; '.join(self.unclean_stops)}]" if self.unclean_stops else ""),
            f"  two keyring items:       {self.two_items}",
            "  at the end:              " + (f"a forced refresh failed: {self.end_check}" if self.end_check else
                                              "a forced refresh works"),
        ]
        if self.kill_outcomes:
            order = ("during a refresh", "during a login", "works after", "login_required after", "other after")
            lines.append("  sigkill:                 " + ", ".join(
                f"{k} {self.kill_outcomes[k]}" for k in order if k in self.kill_outcomes) +
                         (f"  [{'; '.join(self.kill_other)}]" if self.kill_other else ""))
        lines.append("  per kind:  faults | failed during / <= grace / later | longest fault end -> next token, "
                     "-> last failure | token requests/s during")
        for kind in s.kinds:
            mine = [f for f in self.faults if f.kind == kind]
            if not mine:
                continue
            counts = {"during": 0, "grace": 0, "later": 0}
            for p, f in places:
                if f is not None and f.kind == kind:
                    counts[p] += 1
            rec = [self.recovery(f) for f in mine]
            rec_text = "none" if None in rec else f"{max(rec):.2f} s"
            tail = max(self.last_failure_after(f) for f in mine)
            secs = sum(f.end - f.start for f in mine)
            req = sum(f.token_requests for f in mine)
            lines.append(f"    {kind:8s} {len(mine):3d} | {counts['during']:4d} / {counts['grace']:3d} / "
                         f"{counts['later']:4d} | {rec_text:>8s}, {tail:5.2f} s | "
                         + (rate(req, secs) if kind in SERVER_FAULTS else "-"))
        if later:
            first = sorted(later, key=lambda c: c.start)[:5]
            lines.append("  first failures later than the grace: " + "; ".join(
                f"{at(c.start)} ({self._since(c)}) exit {c.rc}" for c in first))
        return "\n".join(lines)

    def _since(self, c: Call) -> str:
        _, f = self.place(c)
        return f"{c.start - f.end:.1f} s after {f.kind}" if f else "before any fault"

    @staticmethod
    def _reasons(calls: list[Call]) -> str:
        counts: dict[str, int] = {}
        for c in calls:
            counts[c.reason] = counts.get(c.reason, 0) + 1
        return "; ".join(f"{n}x {r}" for r, n in sorted(counts.items(), key=lambda kv: -kv[1])[:3])


def _reason(rc: int | None, stderr: str) -> str:
    """A failed call's exit code and first stderr line, numbers as N (the same failure reads the same), no token."""
    if rc is None:
        return "no answer within the call limit"
    line = next((l.strip() for l in stderr.splitlines() if l.strip()), "")
    line = _SECRETISH.sub("<...>", line)
    return f"exit {rc}: " + re.sub(r"\d+(\.\d+)?", "N", line)[:160]


class Soak:
    def __init__(self, agent, keyring, proxy, settings: Settings, account: str = "work"):
        self.agent, self.keyring, self.proxy, self.s, self.account = agent, keyring, proxy, settings, account
        self.rng = random.Random(settings.seed)
        self.lock = threading.Lock()
        self.calls: list[Call] = []
        self.faults: list[Fault] = []
        self.stop = threading.Event()
        self.died = threading.Event()
        self.intended: set[int] = set()  # pids the soak killed or stopped itself
        self.report: Report | None = None
        self.last_start = float("inf")  # no fault starts after this moment

    # -- clients

    def _client(self, index: int):
        rng = random.Random(f"{self.s.seed}-client-{index}")
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                result = self.agent.authctl("token", self.account, timeout=self.s.call_timeout)
                rc, reason = result.returncode, ("" if result.returncode == 0 else
                                                 _reason(result.returncode, result.stderr))
            except subprocess.TimeoutExpired:
                rc, reason = None, _reason(None, "")
            with self.lock:
                self.calls.append(Call(index, started, time.monotonic(), rc, reason))
            self.stop.wait(rng.uniform(*PAUSE))

    # -- the agent's life

    def _watch(self, proc):
        rc = proc.wait()
        with self.lock:
            intended = proc.pid in self.intended
        if not intended:
            with self.lock:
                self.report.deaths.append(f"exit {rc} at {time.monotonic() - self.report.started:.1f} s")
            self.died.set()

    def _started(self):
        threading.Thread(target=self._watch, args=(self.agent.proc,), daemon=True).start()

    def _revive(self):
        """Restarts the agent if it died on its own (counted by _watch)."""
        if self.died.is_set() or not self.agent.alive():
            self.died.clear()
            if not self.agent.alive():
                self.agent.start()
                self._started()

    def _pause(self, seconds: float):
        """Waits `seconds` (load shape: a gap, a fault's length), restarting an agent that dies meanwhile."""
        until = time.monotonic() + seconds
        while (left := until - time.monotonic()) > 0:
            if self.died.wait(left):
                self._revive()

    def _kill_agent(self, sig: int) -> int | None:
        proc = self.agent.proc
        with self.lock:
            self.intended.add(proc.pid)
        if sig == signal.SIGKILL:
            self.agent.kill9()
            return None
        try:
            return self.agent.stop(expect_rc=None)
        except AssertionError as e:  # did not exit within 15 s of SIGTERM (stop() then killed it)
            self.report.unclean_stops.append(str(e).splitlines()[0])
            return None

    # -- moments

    def _armed(self, mode: str, canned=None) -> float | None:
        """Arms the proxy with `mode` for the next token request and waits for it (at most MOMENT_LIMIT s, and not
        past the last moment a fault may start). Returns when it fired, or None (disarmed: too late)."""
        self.proxy.arm(mode, canned, prefix=TOKEN_PATH)
        fired = self.proxy.fired
        until = min(time.monotonic() + MOMENT_LIMIT, self.last_start)
        while not fired.wait(max(0.0, min(0.2, until - time.monotonic()))):
            if self.died.is_set():
                self._revive()
            if time.monotonic() >= until:
                self.proxy.set("pass")
                if not fired.is_set():
                    return None
        return self.proxy.fired_at

    # -- faults

    def _server(self, kind: str) -> Fault | None:
        mode, canned = SERVER_FAULTS[kind]
        duration = self.rng.uniform(*SERVER_FAULT_SECONDS)
        started = self._armed(mode, canned)
        if started is None:
            return None
        fault = Fault(kind, started)
        self._pause(started + duration - time.monotonic())
        self.proxy.set("pass")
        fault.end = time.monotonic()
        fault.token_requests = sum(1 for t in self.proxy.times_of(TOKEN_PATH) if fault.start <= t <= fault.end)
        return fault

    def _sigterm(self) -> Fault:
        fault = Fault("sigterm", time.monotonic())
        rc = self._kill_agent(signal.SIGTERM)
        if rc not in (0, None):
            self.report.unclean_stops.append(f"exit {rc}")
        self.agent.start()
        self._started()
        fault.end = time.monotonic()
        return fault

    def _keyring(self) -> Fault | None:
        if self._armed("pass") is None:
            return None
        fault = Fault("keyring", time.monotonic())
        pid = self.keyring.daemon_pid
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(pid), 10, "the killed gnome-keyring-daemon to be gone")
        wait_for(lambda: self.keyring._dbus("org.freedesktop.DBus", "/org/freedesktop/DBus",
                                            "org.freedesktop.DBus.NameHasOwner", "org.freedesktop.secrets")
                 == "(false,)", 10, "org.freedesktop.secrets to lose its owner")
        self.keyring.start_keyring()
        fault.end = time.monotonic()
        return fault

    def _sigkill(self) -> Fault:
        """The kill -9 soak's cycle (see the module's docstring)."""
        op = "login" if self.rng.random() < 0.3 else "refresh"
        args = ("login", self.account) if op == "login" else ("token", self.account, "--refresh")
        op_started = time.monotonic()
        client = self.agent.authctl_popen(*args)
        time.sleep(self.rng.uniform(0, 1.2 if op == "login" else 0.25))  # load shape: the kill's moment
        fault = Fault("sigkill", time.monotonic())
        self._kill_agent(signal.SIGKILL)
        try:
            out, _ = client.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            client.kill()
            out, _ = client.communicate(timeout=5)
        if op == "refresh":
            self.agent.remember(out.strip())
        outcomes = self.report.kill_outcomes
        outcomes[f"during a {op}"] = outcomes.get(f"during a {op}", 0) + 1
        if self.keyring.secret_tool_count(self.account) > 1:
            self.report.two_items += 1
        self.agent.start()
        self._started()
        result = self.agent.authctl("token", self.account, "--refresh", timeout=60)
        if result.returncode == 0:
            outcomes["works after"] = outcomes.get("works after", 0) + 1
        elif result.returncode == 4:
            outcomes["login_required after"] = outcomes.get("login_required after", 0) + 1
            if self._rotated_before(fault.start, since=min(op_started, fault.start - 2)):
                self.report.rotation_window_kills += 1
            else:
                self.report.sign_ins_lost.append(f"login_required after a kill during a {op} with no rotation "
                                                 f"before it, at {fault.start - self.report.started:.1f} s")
            self.agent.login(self.account)
        else:
            outcomes["other after"] = outcomes.get("other after", 0) + 1
            self.report.kill_other.append(f"after a kill during a {op}: {_reason(result.returncode, result.stderr)}")
        fault.end = time.monotonic()
        return fault

    def _rotated_before(self, moment: float, since: float) -> bool:
        """A token request reached the server between `since` and `moment` and the server answered 200."""
        with self.proxy._lock:
            forwarded = list(self.proxy.forwarded)
        return any(since <= t <= moment and hit == f"POST {TOKEN_PATH}" and status == 200
                   for t, hit, status in forwarded)

    def _check(self, fault: Fault):
        """After every fault: at most one keyring item; none is a sign-in lost (then sign in again)."""
        items = self.keyring.secret_tool_count(self.account)
        if items > 1:
            self.report.two_items += 1
        elif items == 0:
            self.report.sign_ins_lost.append(f"no keyring item after {fault.kind} at "
                                             f"{fault.start - self.report.started:.1f} s")
            self.agent.login(self.account)

    # -- the run

    def run(self, bin_dir: str = "") -> Report:
        s = self.s
        started = time.monotonic()
        self.report = Report(s, started, started, self.calls, self.faults, bin_dir=bin_dir)
        self._started()
        clients = [threading.Thread(target=self._client, args=(i,), daemon=True) for i in range(s.clients)]
        for t in clients:
            t.start()
        deadline = started + s.seconds
        # The last fault leaves room to see the agent recover: none starts in the run's last 15 s.
        self.last_start = deadline - 15
        order: list[str] = []
        try:
            while s.count is None or len(self.faults) < s.count:
                if not order:
                    order = list(s.kinds)
                    self.rng.shuffle(order)
                kind = order.pop()
                self._pause(self.rng.uniform(*s.gap))
                if time.monotonic() > self.last_start:
                    break
                self._revive()
                fault = {"sigkill": self._sigkill, "sigterm": self._sigterm,
                         "keyring": self._keyring}.get(kind, lambda: self._server(kind))()
                if fault is None:  # its moment came too late
                    break
                with self.lock:
                    self.faults.append(fault)
                self._check(fault)
            # Then the rest of the run (a counted run: a few seconds), to see the agent recover from the last fault.
            self._pause(max(0.0, deadline - time.monotonic()) if s.count is None else max(s.gap[1], 3.0))
        finally:
            self.stop.set()
            for t in clients:
                t.join(timeout=s.call_timeout + 10)
            self.proxy.set("pass")
        self._revive()
        # At the end: a forced refresh works and the keyring holds one item.
        result = self.agent.authctl("token", self.account, "--refresh", timeout=60)
        if result.returncode == 4:
            self.report.sign_ins_lost.append("at the end: login_required")
        elif result.returncode != 0:
            self.report.end_check = _reason(result.returncode, result.stderr)
        items = self.keyring.secret_tool_count(self.account)
        if items > 1:
            self.report.two_items += 1
        elif items == 0 and result.returncode == 0:
            self.report.sign_ins_lost.append("at the end: no keyring item")
        self.report.ended = time.monotonic()
        with self.lock:
            self.intended.add(self.agent.proc.pid)  # the fixture's teardown stops it
        return self.report
