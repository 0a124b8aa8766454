"""Hostile world, crashes and restarts (issue 7; issue 4; SECURITY.md 14, 19, 23).

- test_stopped_keyring_*: with gnome-keyring-daemon SIGSTOPped, cached tokens of all three accounts and `status`
  are still answered (latencies printed; the issue's target is 100 ms), a keyring operation fails with
  keyring_error and a clear message at the libsecret deadline (20 s) instead of hanging, and after SIGCONT it works.
- kill -9 at random moments during rotating refreshes and sign-ins, then restart (never two keyring items; the account
  works or says login_required): one of the faults of the fault soak, test_fault_soak.py (`scripts/soak --kill9 N`
  runs that cycle alone, N times).
- test_sigsegv_leaves_no_core: SIGSEGV kills the agent at once, without a core file (not dumpable, RLIMIT_CORE 0)
  and without Swift's crash backtrace (registers and memory bytes) in its log.
"""
import os
import signal
import statistics
import subprocess
import time

from conftest import default_account, pid_alive
from test_hostile import assert_alive
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

ACCOUNTS = ("work", "personal", "other")  # the redirect URIs the fixture server registers


def test_stopped_keyring_serves_cached_tokens_and_times_out_keyring_work(make_agent, keyring, auth_server):
    agent = make_agent(accounts={name: default_account(auth_server.issuer) for name in ACCOUNTS})
    tokens = {}
    for name in ACCOUNTS:
        agent.login(name)
        tokens[name] = agent.token(name)
        agent.remember(keyring.secret_tool_lookup(name, auth_server.issuer))
    os.kill(keyring.daemon_pid, signal.SIGSTOP)
    stuck = None
    try:
        # A keyring operation starts first and waits on the stopped daemon.
        started_stuck = time.monotonic()
        stuck = agent.authctl_popen("token", "work", "--refresh")
        time.sleep(0.5)
        assert stuck.poll() is None, "the forced refresh did not wait for the keyring"

        latencies = {}
        for name in ACCOUNTS * 3:
            started = time.monotonic()
            assert agent.token(name) == tokens[name], f"{name}: not the cached token"
            latencies.setdefault(name, []).append((time.monotonic() - started) * 1000)
        started = time.monotonic()
        status = agent.status_json()
        status_ms = (time.monotonic() - started) * 1000
        assert {a["name"] for a in status["accounts"]} == set(ACCOUNTS)
        (ping,) = agent.raw(b'{"v":1,"id":7,"op":"ping"}\n')
        assert ping["id"] == 7

        out, err = stuck.communicate(timeout=60)
        stuck_s = time.monotonic() - started_stuck
        assert stuck.returncode == 5, (stuck.returncode, err)
        assert "keyring did not answer within" in err, err
        assert out == ""
    finally:
        os.kill(keyring.daemon_pid, signal.SIGCONT)
        if stuck is not None and stuck.poll() is None:
            stuck.kill()
            stuck.communicate()
    print("stopped keyring: cached token latency per account (ms): " +
          ", ".join(f"{n} median {statistics.median(v):.0f} max {max(v):.0f}" for n, v in latencies.items()) +
          f"; status {status_ms:.0f} ms (keyring {status['agent']['keyring']}); "
          f"keyring operation failed after {stuck_s:.1f} s (target for tokens: 100 ms)")

    # SIGCONT: keyring work succeeds again without a restart.
    fresh = agent.token("work", "--refresh")
    assert fresh != tokens["work"]
    assert auth_server.introspect(fresh)["active"] is True
    assert agent.status_json()["agent"]["keyring"] == "available"
    for name in ACCOUNTS:
        assert keyring.secret_tool_count(name) == 1
        agent.remember(keyring.secret_tool_lookup(name, auth_server.issuer))
    assert_alive(agent)


def test_sigsegv_leaves_no_core(make_agent, tmp_path):
    agent = make_agent(start=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    previous = os.getcwd()
    os.chdir(cwd)  # the agent inherits it: a core file named by a relative core_pattern would land here
    try:
        agent.start()
    finally:
        os.chdir(previous)
    pid = agent.proc.pid
    assert os.readlink(f"/proc/{pid}/cwd") == str(cwd)
    pattern = open("/proc/sys/kernel/core_pattern").read().strip()

    # Control: a dumpable process with unlimited core size, same cwd, same signal.
    control = subprocess.run(["sh", "-c", "ulimit -c unlimited 2>/dev/null; kill -SEGV $$"], cwd=cwd)
    control_cores = sorted(p.name for p in cwd.iterdir() if p.name.startswith("core"))
    for p in cwd.iterdir():
        p.unlink()
    if pattern.startswith("core") and "/" not in pattern:
        # A plain relative pattern: a dumpable process does leave a core here, so the check below can fail.
        assert control_cores, f"the control process left no core with core_pattern {pattern!r}: the test proves nothing"

    os.kill(pid, signal.SIGSEGV)
    rc = agent.proc.wait(timeout=15)
    assert rc == -signal.SIGSEGV, rc
    assert not pid_alive(pid)
    time.sleep(0.5)
    cores = [p.name for p in cwd.iterdir() if p.name.startswith("core")]
    assert cores == [], f"the agent left a core file: {cores}"
    # Nor a crash report with register and memory bytes in its log (Swift's runtime backtracer).
    assert "Registers:" not in agent.log() and "Backtrace took" not in agent.log(), agent.log()[-1500:]
    print(f"SIGSEGV: agent exit {rc}, no core file (core_pattern {pattern!r}; a dumpable control process "
          f"exited {control.returncode} and left {control_cores or 'no core file either'})")
