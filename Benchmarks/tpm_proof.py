"""What a DPoP key held by the TPM costs a caller (scripts/bench, BENCH_ONLY=tpm; docs/BENCHMARKS.md, "DPoP keys in
the TPM"): the agent in AUTH_AGENT_BIN_DIR with two accounts on the DPoP fixture server, one with a software key
and one with `dpop_key = "tpm"` on a fresh swtpm, each signed in once. Measured, alternating the two accounts:

  proof      one `token` request with `dpop_method`/`dpop_url` on the agent's socket (a cached token and its proof:
             the proof is all the agent does), minus nothing: the whole round trip, median and p90
  no proof   the same request without them (the cached token alone): the floor the proof adds to
  header     `authctl token ACCOUNT --header --url URL` as a whole process, median and p90

Uses the e2e suite's fixtures (a private bus with gnome-keyring, the authorization server, the scripted browser)."""
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "Tests" / "e2e"))

from conftest import Agent, AuthServer, _private_bus, default_account, render_config, short_tmpdir  # noqa: E402
from test_tpm import SoftwareTPM  # noqa: E402

RUNS = int(os.environ.get("BENCH_TPM_RUNS", "200"))
SPAWNS = int(os.environ.get("BENCH_TPM_SPAWNS", "60"))


def request(sock_path: str, account: str, url: str | None) -> float:
    line = {"v": 1, "id": 1, "op": "token", "account": account}
    if url:
        line.update(dpop_method="GET", dpop_url=url)
    start = time.perf_counter()
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(sock_path)
        s.sendall((json.dumps(line) + "\n").encode())
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    elapsed = time.perf_counter() - start
    answer = json.loads(reply)
    assert "result" in answer, answer.get("error")
    return elapsed


def summary(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return f"median {statistics.median(ordered) * 1e3:7.2f} ms   p90 {p90 * 1e3:7.2f} ms   ({len(ordered)} runs)"


def main():
    tpm = SoftwareTPM().start()
    state = short_tmpdir("aa-bench-as-")
    server = AuthServer(state, extra_env={"AS_DPOP": "optional"})
    server.start()
    bus = _private_bus("aa-bench-kr-", with_keyring=True)
    keyring = next(bus)
    agent = None
    try:
        accounts = {"work": default_account(server.issuer, dpop_key="software"),
                    "personal": default_account(server.issuer, dpop_key="tpm")}
        agent = Agent(short_tmpdir("aa-bench-ag-"), keyring.env, render_config(accounts, {"tpm_tcti": tpm.tcti}),
                      args=["--log-level", "notice"])
        agent.start()
        for account in accounts:
            agent.login(account)
        assert agent.account_status("personal")["dpop_key"] == "tpm"
        url = f"{server.base}/api/resource"
        sock = str(agent.socket_path)
        results: dict[str, list[float]] = {f"{a} {k}": [] for a in ("work", "personal") for k in ("proof", "none")}
        for account in accounts:  # warm: the TPM connection and its storage key, the agent's code
            for _ in range(5):
                request(sock, account, url)
        for _ in range(RUNS):
            for account in accounts:
                results[f"{account} proof"].append(request(sock, account, url))
                results[f"{account} none"].append(request(sock, account, None))
        header: dict[str, list[float]] = {"work": [], "personal": []}
        for _ in range(SPAWNS):
            for account in accounts:
                start = time.perf_counter()
                out = subprocess.run([str(agent.bins / "authctl"), "token", account, "--header", "--url", url],
                                     env=agent.env, capture_output=True, timeout=30)
                header[account].append(time.perf_counter() - start)
                assert out.returncode == 0, out.stderr
        name = {"work": "software key", "personal": "TPM key (swtpm)"}
        print("DPoP proof on the socket (a cached token with its proof; Benchmarks/tpm_proof.py)")
        for account in accounts:
            print(f"  {name[account]:16} proof     {summary(results[account + ' proof'])}")
            print(f"  {name[account]:16} no proof  {summary(results[account + ' none'])}")
        print("authctl token ACCOUNT --header --url URL (whole process)")
        for account in accounts:
            print(f"  {name[account]:16} {summary(header[account])}")
        extra = statistics.median(results["personal proof"]) - statistics.median(results["work proof"])
        print(f"a TPM-held key adds {extra * 1e3:.2f} ms a proof on swtpm")
    finally:
        if agent is not None:
            agent.cleanup()
        next(bus, None)
        server.stop()
        tpm.cleanup()


if __name__ == "__main__":
    main()
