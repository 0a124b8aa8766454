"""How much agent memory a connection holds, by what it has done: opened only, sent part of a line (read, not
decoded), or sent a request that the socket's fast path passes on to the connection's task (status, or a token
request the cache cannot answer). Opens N connections to a running agent, brings them all to that state, and
prints the agent's VmRSS before and with them open. Not a test; a measuring aid for docs/BENCHMARKS.md.

    python3 Benchmarks/conn_memory.py SOCKET AGENT_PID N idle|partial|status|token [ACCOUNT]

The figure after replies includes what the requests allocated and freed but malloc has not yet returned (the agent
trims its heap only once no client is connected).
"""
import socket
import sys
import time


def rss_kib(pid: int) -> int:
    return next(int(line.split()[1]) for line in open(f"/proc/{pid}/status") if line.startswith("VmRSS"))


def main() -> None:
    path, pid, count, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    account = sys.argv[5] if len(sys.argv) > 5 else "work"
    sends = {
        "idle": None,
        "partial": b'{"v":1,"id":1,"op":"sta',
        "status": b'{"v":1,"id":1,"op":"status"}\n',
        "token": b'{"v":1,"id":1,"op":"token","account":"%s"}\n' % account.encode(),
    }
    if mode not in sends:
        sys.exit(f"mode must be one of {', '.join(sends)}")
    before = rss_kib(pid)
    conns = []
    for _ in range(count):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        conns.append(s)
    if sends[mode]:
        for s in conns:
            s.sendall(sends[mode])
    if mode in ("status", "token"):
        for s in conns:
            s.settimeout(30)
            s.recv(65536)
    time.sleep(0.5)
    held = rss_kib(pid)
    print(f"{mode}: {count} connections: agent VmRSS {before} -> {held} kB ({(held - before) / count:+.1f} kB each)")
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
