"""Hostile world, the socket (issue 7; SECURITY.md 22): thousands of idle connections and a flood of clients, a
client that hangs up while its refresh runs, and byte streams that are not the protocol. Each test fails if the
protection it names breaks. (Other uids, loosened modes, 10 MB lines and deep JSON: test_hostile.py; stale and
live sockets: test_errors.py::test_stale_socket_and_second_agent.)
"""
import fcntl
import json
import os
import resource
import select
import socket
import statistics
import struct
import subprocess
import termios
import threading
import time

from conftest import connection_closed, read_replies, wait_for
from test_hostile import assert_alive, connect_retrying, fault_proxy, fd_count, proxied_agent, vm_rss_kib  # noqa: F401
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

IDLE = 5000
FLOODERS = 64
CONNECTION_CAP = 4096  # SocketServer.maxConnections


def raise_own_fd_limit(wanted: int):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(wanted, soft), max(wanted, hard)))  # root may raise hard
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft >= wanted, f"this test needs {wanted} open files; RLIMIT_NOFILE allows {soft}"


def test_idle_connections_and_a_flood_do_not_lock_out_a_real_client(signed_in_agent, keyring):
    """5,000 idle connections (more than the agent's cap of 4,096) plus 64 clients hammering it: a real
    `authctl token` is still answered with the right token, and the agent's open files stay under its cap."""
    agent = signed_in_agent
    raise_own_fd_limit(IDLE + FLOODERS + 512)
    pid = agent.proc.pid
    token = agent.token("work")
    limits = open(f"/proc/{pid}/limits").read()
    nofile = next(line for line in limits.splitlines() if line.startswith("Max open files")).split()
    assert nofile[3] == nofile[4], f"the agent did not raise its soft open-file limit to the hard one: {nofile}"
    fds_before = fd_count(pid)

    idle: list[socket.socket] = []
    stop = threading.Event()
    answered = [0] * FLOODERS
    errors: list[str] = []

    def flood(i: int):
        while not stop.is_set():
            try:
                with connect_retrying(agent, timeout=5) as s:
                    op = b'{"v":1,"id":1,"op":"status"}\n' if i % 2 else b'{"v":1,"id":1,"op":"token","account":"work"}\n'
                    s.sendall(op * 4)
                    answered[i] += len(read_replies(s, 4, 10))
            except OSError as e:  # refused or closed while the agent evicts: the flood goes on
                if len(errors) < 5:
                    errors.append(repr(e))

    threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(FLOODERS)]
    latencies = []
    peak_fds = 0
    try:
        for _ in range(IDLE):
            idle.append(connect_retrying(agent))
        peak_fds = fd_count(pid)
        for t in threads:
            t.start()
        time.sleep(1)
        for _ in range(5):
            started = time.monotonic()
            result = agent.authctl("token", "work", timeout=60)
            latencies.append((time.monotonic() - started) * 1000)
            assert result.returncode == 0, (result.returncode, result.stderr)
            assert result.stdout.strip() == token, "the real client got a different token under load"
            peak_fds = max(peak_fds, fd_count(pid))
        status = agent.status_json()
        assert status["agent"]["pid"] == pid
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        for s in idle:
            s.close()
    print(f"authctl token with {IDLE} idle connections and {FLOODERS} flooding clients: "
          f"median {statistics.median(latencies):.0f} ms, max {max(latencies):.0f} ms (target 200 ms); "
          f"flood answers {sum(answered)}; agent fds {fds_before} -> peak {peak_fds}; first flood errors {errors[:3]}")
    assert sum(answered) > 0, "the flood never got an answer (it measured nothing)"
    # The cap, plus the connection being refused or identified (its pidfd) and spare for the agent's own transient
    # files (/proc reads, the pins of the flooders). The one accept loop closes an evicted connection before it
    # accepts the next, so nothing piles up between accept and close.
    assert peak_fds <= fds_before + CONNECTION_CAP + 128, f"open fds not bounded: {peak_fds}"
    wait_for(lambda: fd_count(pid) <= fds_before + 2, 20, "the agent's fds to return to baseline")
    assert_alive(agent)
    assert keyring.secret_tool_count("work") == 1


def test_client_that_hangs_up_during_its_refresh(make_agent, keyring, auth_server, fault_proxy):
    """The client closes before the reply (the agent's write then fails: SIGPIPE must not kill it); the refresh
    still completes, its result is cached (the server saw exactly one refresh), and the next request is served
    from the cache."""
    proxy = fault_proxy
    agent = proxied_agent(make_agent, proxy)
    agent.login("work")
    old = agent.token("work")
    old_rt = keyring.secret_tool_lookup("work", auth_server.issuer)
    posts = proxy.token_posts()

    proxy.set("hold")
    s = agent.connect()
    s.sendall(b'{"v":1,"id":1,"op":"token","account":"work","force_refresh":true}\n')
    assert proxy.reached.wait(20), "the refresh never reached the token endpoint"
    s.close()  # gone before the answer
    proxy.release.set()
    # The rotated refresh token reaches the keyring just before the access token is cached.
    wait_for(lambda: keyring.secret_tool_lookup("work", auth_server.issuer) not in (None, old_rt), 20,
             "the abandoned refresh to store its rotated refresh token")
    time.sleep(0.5)
    assert agent.alive(), f"the agent died when its client vanished:\n{agent.log()[-2000:]}"
    proxy.set("pass")
    new = agent.token("work")
    assert new != old, "the refresh result was not cached (the old token is still served)"
    assert proxy.token_posts() == posts + 1, f"the server saw {proxy.token_posts() - posts} refreshes, not 1"
    assert auth_server.introspect(new)["active"] is True
    agent.remember(new, keyring.secret_tool_lookup("work", auth_server.issuer))
    assert_alive(agent)


def test_bytes_that_are_not_the_protocol(signed_in_agent, keyring):
    """Invalid UTF-8, a binary 0xFFFFFFFF length prefix (as a length-prefixed protocol would send), NUL bytes and
    lone CRs: each gets an error reply or a close, the agent stays up, and 300 rounds grow its RSS by < 5 MB."""
    agent = signed_in_agent
    pid = agent.proc.pid
    agent.token("work")
    cases = {
        "invalid utf-8": b"\xff\xfe\xfd\xc3\x28\xa0\xa1\n",
        "invalid utf-8 inside a request": b'{"v":1,"id":3,"op":"token","account":"w\xc3\x28rk"}\n',
        "overlong utf-8": b'{"v":1,"id":4,"op":"p\xc0\xafing"}\n',
        "0xFFFFFFFF length prefix": b"\xff\xff\xff\xff" + b'{"v":1,"id":5,"op":"ping"}\n',
        "NUL bytes": b"\x00" * 64 + b"\n",
        "CR only": b"\r\r\r\r\n",
    }
    for name, data in cases.items():
        with agent.connect() as s:
            s.sendall(data)
            replies = read_replies(s, 1, 5)
            if replies:
                assert "error" in replies[0], (name, replies)
                assert replies[0]["error"]["code"] == "bad_request", (name, replies)
            else:
                assert connection_closed(s, 1), f"{name}: neither an error reply nor a close"
        assert_alive(agent)

    # The length prefix followed by what a length-prefixed client would send next: 4 GiB announced, 1 MiB sent
    # without a newline. Never buffered past the line cap.
    with agent.connect() as s:
        try:
            s.sendall(b"\xff\xff\xff\xff" + b"\x01" * (1 << 20))
        except OSError:
            pass
        replies = read_replies(s, 1, 10)
        assert replies and replies[0]["error"]["code"] == "message_too_large", replies
        assert connection_closed(s, 5)

    rss_before = vm_rss_kib(pid)
    for _ in range(50):
        for data in cases.values():
            with agent.connect() as s:
                s.sendall(data)
                read_replies(s, 1, 5)
    rss_after = vm_rss_kib(pid)
    print(f"RSS after 300 garbage requests: {rss_before} -> {rss_after} KiB (+{rss_after - rss_before} KiB)")
    assert rss_after - rss_before < 5 * 1024, (rss_before, rss_after)
    assert_alive(agent)
    assert keyring.secret_tool_count("work") == 1


def test_a_client_that_never_reads_its_replies_costs_the_agent_a_bounded_buffer(signed_in_agent, keyring):
    """A client writes 100,000 requests (cached tokens, and a `ping` every tenth, which runs as a task) and reads no
    reply: the agent answers until the socket stops taking its replies, keeps at most its output limit (64 KiB) plus
    the replies of the requests in flight, and then stops reading that client, whose writes wait in the kernel.
    Meanwhile `authctl token` is served, and the agent's memory does not grow with what the client sent. Once the
    client reads, every reply arrives exactly once."""
    agent = signed_in_agent
    pid = agent.proc.pid
    token = agent.token("work")
    count = 100_000
    requests = b"".join(b'{"v":1,"id":%d,"op":"ping"}\n' % i if i % 10 == 0
                        else b'{"v":1,"id":%d,"op":"token","account":"work"}\n' % i for i in range(1, count + 1))
    rss_before = vm_rss_kib(pid)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(agent.socket_path))
    s.setblocking(False)
    sent = 0
    # Write until the socket has taken nothing for a second: the agent has stopped reading this client.
    while sent < len(requests):
        _, writable, _ = select.select([], [s], [], 1.0)
        if not writable:
            break
        try:
            sent += s.send(requests[sent:sent + 65536])
        except BlockingIOError:
            continue
    assert sent < len(requests), "the agent read all 4.5 MB without the client reading a reply: no back-pressure"
    rss_held = vm_rss_kib(pid)

    result = agent.authctl("token", "work", timeout=10)
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert result.stdout.strip() == token, "another client is not served while one does not read"

    # Now read everything, while the rest of the requests is written.
    s.setblocking(True)
    writer = threading.Thread(target=lambda: s.sendall(requests[sent:]), daemon=True)
    writer.start()
    received, ids = b"", []
    s.settimeout(60)
    while len(ids) < count:
        chunk = s.recv(1 << 20)
        assert chunk, f"the agent closed the connection after {len(ids)} replies"
        received += chunk
        *lines, received = received.split(b"\n")
        ids.extend(json.loads(line)["id"] for line in lines)
    writer.join(10)
    s.close()
    print(f"not-reading client: the agent took {sent:,} of {len(requests):,} request bytes before it stopped reading; "
          f"VmRSS {rss_before} -> {rss_held} kB while held")
    assert sorted(ids) == list(range(1, count + 1)), "a reply was lost or repeated"
    # What the agent holds for the client: its output limit and 16 replies in flight (the socket buffers are the
    # kernel's). 4 MB leaves room for the allocator and is a fifth of the 18 MB of replies it would have kept
    # without back-pressure.
    assert rss_held - rss_before < 4 * 1024, f"the agent's memory grew by {rss_held - rss_before} kB for one client"
    assert_alive(agent)


def test_descriptors_a_client_sends_with_its_requests_never_stay_in_the_agent(signed_in_agent, keyring, tmp_path):
    """A client attaches open files to its requests (`SCM_RIGHTS`, 1 and 4 at a time, the most that would fit if
    the agent's control buffer had room beside the sender's credentials): the requests are answered, and none of
    those files is open in the agent afterwards. Descriptors that reached the agent would stay there unseen, one
    leak per request, until it could no longer accept: a denial of service by any same-user client."""
    agent = signed_in_agent
    pid = agent.proc.pid
    token = agent.token("work")
    marker = tmp_path / "sent-to-the-agent"
    marker.write_text("not the agent's")
    files = [os.open(marker, os.O_RDONLY) for _ in range(4)]
    fds_before = fd_count(pid)
    try:
        for i in range(100):
            with agent.connect() as s:
                attached = files[: 1 + 3 * (i % 2)]
                socket.send_fds(s, [b'{"v":1,"id":%d,"op":"token","account":"work"}\n' % i], attached)
                replies = read_replies(s, 1, 10)
                answered = bool(replies) and replies[0].get("result", {}).get("access_token") == token
                assert answered, f"request {i} with {len(attached)} descriptors was not answered with the token"
    finally:
        for fd in files:
            os.close(fd)
    held = [name for name in os.listdir(f"/proc/{pid}/fd")
            if os.path.realpath(f"/proc/{pid}/fd/{name}") == str(marker)]
    assert not held, f"the agent holds {len(held)} descriptors a client sent it"
    # The last connections close in the agent once it reads their clients' hang-ups.
    wait_for(lambda: fd_count(pid) <= fds_before + 2, 10, "the agent's open files to come back to where they were")
    assert_alive(agent)


def test_a_new_client_is_told_when_every_connection_is_busy(make_agent, keyring, auth_server):
    """At its connection cap with a request in flight on every connection (here each waits for a person's consent),
    the agent tells a new client `agent_busy`, with when to retry, before it closes it; `authctl` says so (exit 1, a
    sentence and a hint) instead of "closed the connection without answering", in `token`'s fast path as in other
    verbs; once a busy connection is gone, the next client is served. The cap is lowered the way a low hard
    open-file limit lowers it for a user (RLIMIT_NOFILE 272: a cap of 16, SocketServer.connectionLimit)."""
    agent = make_agent(work={"confirm": "first-use"}, agent={"consent_timeout": 300}, start=False)
    agent.launcher = ["/usr/bin/prlimit", "--nofile=272:272", "--"]
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    cap = 16
    busy: list[socket.socket] = []
    try:
        for _ in range(cap):
            s = agent.connect(timeout=30)
            s.sendall(b'{"v":1,"id":1,"op":"token","account":"work"}\n')
            busy.append(s)
        for s in busy:
            [event] = read_replies(s, 1, 30)
            assert event.get("event", {}).get("type") == "consent_required", event

        for verb in (["token", "work"], ["status"]):
            refused = agent.authctl(*verb, timeout=30)
            assert refused.returncode == 1, (verb, refused.returncode, refused.stderr)
            assert refused.stdout == ""
            assert f"auth-agent has {cap} connections open, each with a request in flight" in refused.stderr, refused.stderr
            assert "hint: a program may be holding many requests open" in refused.stderr, refused.stderr
        # The agent refuses at accept, before it reads: a raw client reads the refusal without sending, because a
        # request written after the agent closed meets EPIPE (authctl, above, reads the line in that case too).
        with agent.connect() as s:
            [reply] = read_replies(s, 1, 10)
            assert "id" not in reply and reply["error"]["code"] == "agent_busy" and reply["error"]["retry_after"] == 1, reply
            assert connection_closed(s), "the refused connection stayed open"
        assert "too many connections: refusing a new one" in agent.log()

        busy.pop().close()
        wait_for(lambda: agent.authctl("status", timeout=30).returncode == 0, 20,
                 "a client to be served once a busy connection is gone")
    finally:
        for s in busy:
            s.close()
    assert_alive(agent)


def queued(s: socket.socket) -> int:
    """Bytes waiting in the client's receive queue (SIOCINQ)."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]


def unread_by_the_agent(s: socket.socket) -> int:
    """What the client wrote that the agent has not read yet (SIOCOUTQ)."""
    return struct.unpack("i", fcntl.ioctl(s.fileno(), termios.TIOCOUTQ, b"\0\0\0\0"))[0]


def settled(s: socket.socket, target: int, still: float = 1.0) -> int:
    """Waits until the client's queue holds `target` bytes, or has not grown for `still` seconds: the agent stopped
    writing (its socket is full). Returns the queue's size."""
    last, since = queued(s), time.monotonic()
    while last < target and time.monotonic() - since < still:
        time.sleep(0.01)
        if (now := queued(s)) != last:
            last, since = now, time.monotonic()
    return last


def cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def quiet(pid: int, period: float = 0.3, timeout: float = 10):
    """Waits until process `pid` has used no CPU for `period` seconds (at most `timeout`): the agent has answered
    what it was asked. Only the shape of the test's scene depends on it, not what the test asserts."""
    deadline = time.monotonic() + timeout
    last, since = cpu_ticks(pid), time.monotonic()
    while time.monotonic() - since < period and time.monotonic() < deadline:
        time.sleep(0.02)
        if (now := cpu_ticks(pid)) != last:
            last, since = now, time.monotonic()


class UnreadReplies:
    """A connection whose client asks for cached tokens and does not read the replies, until the agent holds about
    `held` bytes of them the socket did not take (under its 64 KiB output limit: it still reads this client). Every
    request has an id of the same width, so every reply has the same length."""

    def __init__(self, agent, held: int):
        self.s = agent.connect(timeout=30)
        self.sent = 0
        self.send(1)
        self.length = len(self.s.recv(65536))  # one whole reply (the socket is empty until it came)
        self.read = self.length
        while settled(self.s, self.sent * self.length - self.read) == self.sent * self.length - self.read:
            assert self.sent < 20_000, "the socket took 20,000 replies: it never filled"
            self.send(20)
        owed = self.sent * self.length - self.read - queued(self.s)
        self.send(max(0, held - owed) // self.length)
        wait_for(lambda: unread_by_the_agent(self.s) == 0, 10, "the agent to read every request")
        quiet(agent.proc.pid)

    @staticmethod
    def request(i: int) -> bytes:
        return b'{"v":1,"id":%d,"op":"token","account":"work"}\n' % (100_000 + i)

    def send(self, count: int):
        self.s.sendall(b"".join(self.request(self.sent + k) for k in range(1, count + 1)))
        self.sent += count

    def written_by_another_process(self, data: bytes):
        subprocess.run(["/usr/bin/python3", "-c", "import os, sys; os.write(int(sys.argv[1]), sys.argv[2].encode())",
                        str(self.s.fileno()), data.decode()], pass_fds=(self.s.fileno(),), check=True, timeout=30)


def test_a_refusal_for_another_writer_never_lands_inside_a_reply(signed_in_agent):
    """A client asks for tokens and leaves the replies unread until the agent holds some the socket did not take,
    reads a little so that the agent writes part of what it holds (a socket takes a long write in pieces, so the
    part ends inside a reply), reads a little more (room, but not enough for the agent to be told to write), and
    then another process writes a request on the connection. The refusal must come after every reply owed, never
    inside the one half-written: the client reads each reply whole, each once, then the `permission_denied` line,
    then the end of the connection."""
    agent = signed_in_agent
    token = agent.token("work")
    client = UnreadReplies(agent, held=48 * 1024)
    s = client.s
    # One reply read: room for one more write, which takes a piece of what the agent holds.
    received = s.recv(client.length, socket.MSG_WAITALL)
    before = queued(s)
    client.send(1)
    wait_for(lambda: queued(s) > before, 10, "the agent to write part of what it holds")
    piece = queued(s) - before
    print(f"reply {client.length} B; {client.sent} asked; the socket held {before} B of whole replies when the agent "
          f"wrote a piece of {piece} B: it ends {'inside' if (before + piece) % client.length else 'between'} replies")
    # Half of the whole replies before that piece: room again, without the agent being told there is.
    received += s.recv(before // client.length // 2 * client.length, socket.MSG_WAITALL)
    client.written_by_another_process(b'{"v":1,"id":7,"op":"token","account":"work"}\n')

    s.settimeout(30)
    while chunk := s.recv(1 << 20):
        received += chunk
    s.close()
    lines = received.split(b"\n")  # from the second reply (the first was read to measure one)
    assert lines.pop() == b"", "the connection ended inside a line"
    replies = []
    for number, line in enumerate(lines, 2):  # (a line is never shown: it may hold the token)
        try:
            replies.append(json.loads(line))
        except ValueError:
            pytest.fail(f"line {number} of {len(lines) + 1} ({len(line)} B) is not one JSON object: "
                        f"{'the refusal' if b'permission_denied' in line else 'another line'} landed inside a reply")
    refusal = replies.pop()
    assert refusal.get("id") == 7 and refusal.get("error", {}).get("code") == "permission_denied", refusal
    assert "wrote to this connection" in refusal["error"]["message"], refusal
    assert sorted(r["id"] for r in replies) == [100_000 + i for i in range(2, client.sent + 1)], \
        "a reply owed is missing or repeated"
    assert all(r.get("result", {}).get("access_token") == token for r in replies), "a reply is not the token"
    assert_alive(agent)


def test_a_refused_connection_whose_client_never_reads_is_closed(signed_in_agent):
    """The same refusal on a connection whose client never reads: the agent keeps the refusal behind the replies
    owed, but not forever. The connection is closed within the 3 s a client has at shutdown (AcceptLoop.drainLimit);
    meanwhile the agent serves others."""
    agent = signed_in_agent
    token = agent.token("work")
    client = UnreadReplies(agent, held=16 * 1024)
    refused = time.monotonic()
    client.written_by_another_process(b'{"v":1,"id":7,"op":"ping"}\n')
    assert agent.token("work") == token
    watch = select.poll()
    watch.register(client.s, select.POLLRDHUP)
    events = watch.poll(10_000)
    closed = time.monotonic() - refused
    client.s.close()
    assert events and events[0][1] & (select.POLLRDHUP | select.POLLHUP), "the refused connection is still open after 10 s"
    print(f"the refused connection closed {closed:.1f} s after the refusal")
    assert "refused a request written by another process" in agent.log()
    assert_alive(agent)
