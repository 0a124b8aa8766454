"""Issue 53 ("Fail closed at the new doors"): what one sandboxed app can make the agent and the user do, in the
real bubblewrap sandbox of test_sandbox.py (a Flatpak-shaped root with its `/.flatpak-info`, the agent's socket
directory bound in), against the real agent.

- A name that is no account raises no question (`unknown_account`, or `bad_request` for a name no account can
  have); an app has at most 3 questions open at once, and a question nobody answered is not asked again for a
  minute.
- Sandboxed apps share a quarter of the connection cap, and the desktop's own commands are served when it is full.
- "Allow this run" allows the run (the Flatpak instance) that was asked about, not another instance of the app.

The app's side is the host's python3 in the sandbox (`CLIENT`): it opens connections and reports, as JSON lines,
what the agent answered."""
import json

import pytest

from conftest import default_account, read_until, wait_for
from test_identity import audit, run_in_terminal
from test_sandbox import FLATPAK_INFO, INSTANCE, sandboxed

pytestmark = pytest.mark.release  # a few seconds each; also against the installed package

# argv: socket path, then one "ACCOUNT" per connection, or "ACCOUNT,ACCOUNT,..." for requests on one connection.
# Prints one JSON line: per request (in order), "event:TYPE" for the first event, else "code:CODE:MESSAGE" or "ok",
# each as soon as it is known, waiting at most 20 s in all. Then, while stdin is open, "closed N" for each
# connection the agent closes.
CLIENT = r"""
import json, os, select, socket, sys, time
path, groups = sys.argv[1], [g.split(",") for g in sys.argv[2:]]
conns, seen, ids = [], {}, {}
for n, accounts in enumerate(groups):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    for account in accounts:
        rid = len(ids)
        ids[rid] = n
        try:
            s.sendall((json.dumps({"v": 1, "id": rid, "op": "token", "account": account}) + "\n").encode())
        except OSError:  # refused as it connected: the refusal is still there to read
            pass
    conns.append([s, b"", True])
deadline = time.monotonic() + 20
def lines(n):
    s, buf, _ = conns[n]
    try:
        chunk = s.recv(65536)
    except OSError:
        chunk = b""
    if not chunk:
        conns[n][2] = False
        return []
    buf += chunk
    *whole, conns[n][1] = buf.split(b"\n")
    return [json.loads(l) for l in whole if l]
while len(seen) < len(ids) and time.monotonic() < deadline:
    live = [c[0] for c in conns if c[2]]
    if not live:
        break
    ready, _, _ = select.select(live, [], [], max(0, deadline - time.monotonic()))
    for s in ready:
        n = [c[0] for c in conns].index(s)
        for reply in lines(n):
            rid = reply.get("id")
            if rid is None and "error" in reply:  # refused as it connected: the connection's only request
                rid = next(r for r, c in ids.items() if c == n)
            if rid in seen:
                continue
            if "event" in reply:
                seen[rid] = "event:" + reply["event"]["type"]
            elif "error" in reply:
                seen[rid] = "code:%s:%s" % (reply["error"]["code"], reply["error"]["message"])
            else:
                seen[rid] = "ok"
print(json.dumps([seen.get(r, "nothing") for r in range(len(ids))]), flush=True)
open_conns = {n for n, c in enumerate(conns) if c[2]}
while True:
    ready, _, _ = select.select([sys.stdin] + [conns[n][0] for n in open_conns], [], [])
    if sys.stdin in ready and not os.read(0, 1):
        break
    for n in list(open_conns):
        if conns[n][0] in ready and not conns[n][0].recv(65536):
            open_conns.discard(n)
            print("closed %d" % n, flush=True)
"""


def app_client(agent, *groups: str, info: str = FLATPAK_INFO):
    """The sandboxed client (see CLIENT), started; returns it and its report (one entry per request)."""
    app = sandboxed(agent, info=info, command=["/usr/bin/python3", "-c", CLIENT, str(agent.socket_path), *groups])
    try:
        first = read_until(app.stdout, "\n", 60)
    except AssertionError:
        stop(app)
        raise AssertionError(f"the sandboxed client reported nothing: {app.stderr.read()}")
    return app, json.loads(first.splitlines()[0])


def stop(app):
    if app.poll() is None:
        app.kill()  # bwrap; --die-with-parent takes the sandbox with it
        app.wait(timeout=10)


def pending(agent) -> list[dict]:
    result = agent.authctl("pending", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["requests"]


def test_names_that_are_no_account_raise_no_question(make_agent, auth_server):
    """50 names that are no account, from the sandbox: each `unknown_account` at once, no question, no audit record;
    a name no account can have is `bad_request`. Before: each name was an open account that asked about the app,
    so the app raised one question (and notification) per name."""
    agent = make_agent(agent={"consent_timeout": 60})
    names = [f"no-such-{n}" for n in range(50)] + ["../work"]
    app, report = app_client(agent, ",".join(names))
    stop(app)
    assert [r.split(":")[:2] for r in report] == [["code", "unknown_account"]] * 50 + [["code", "bad_request"]], report
    assert "no account named 'no-such-0' is configured" in report[0], report[0]
    assert pending(agent) == [], "a question about a name that is no account"
    assert audit(agent) == [], "nobody was judged"


def test_an_app_has_at_most_three_questions_open(make_agent, auth_server):
    """Five accounts without a policy, asked for at once by one app: three questions, the other two requests refused
    at once (`access_denied`, saying why), not queued. Before: five questions."""
    accounts = {name: default_account(auth_server.issuer) for name in ("a", "b", "c", "d", "e")}
    agent = make_agent(accounts=accounts, agent={"consent_timeout": 60})
    app, report = app_client(agent, "a", "b", "c", "d", "e")
    try:
        asked = [name for name, r in zip("abcde", report) if r == "event:consent_required"]
        refused = [r for r in report if r.startswith("code:access_denied:")]
        assert (len(asked), len(refused)) == (3, 2), report
        assert all("already has 3 questions waiting" in r for r in refused), refused
        assert sorted(q["account"] for q in pending(agent)) == sorted(asked)
        assert [e["reason"] for e in audit(agent)] == ["too_many_questions"] * 2
    finally:
        stop(app)
    wait_for(lambda: pending(agent) == [], 30, "the questions of the app that went away to be withdrawn")


def test_a_question_nobody_answered_is_not_asked_again_for_a_minute(make_agent, auth_server):
    """The app's question times out (consent_timeout 1 s); asking again at once is refused without a question,
    saying when it may ask again. Before: asked again at once, as often as the app liked."""
    agent = make_agent(agent={"consent_timeout": 1})
    first = sandboxed(agent, "token", "work")
    _, err = first.communicate(timeout=60)
    assert first.returncode == 7 and "nobody allowed it within 1 s" in err, err
    again = sandboxed(agent, "token", "work")
    _, err = again.communicate(timeout=60)
    assert again.returncode == 7, err
    assert "may ask again in " in err and "in a terminal" not in err, err
    assert [(e["outcome"], e["reason"]) for e in audit(agent)] == [("denied", "consent_timeout"),
                                                                    ("denied", "asked_recently")]


def test_sandboxed_apps_share_a_quarter_of_the_cap_and_never_lock_out_the_desktop(make_agent, keyring, auth_server):
    """The agent runs with a cap of 64 connections (an open-file limit of 320: the cap leaves 256 spare). An app
    opens 64 connections that each wait for the user's consent: 16 are taken (a quarter), 48 refused `agent_busy` at
    once. The desktop fills the other 48 with requests that wait for a person too, so every connection is busy; the
    desktop's `authctl pending`, `status` and `token` are still served, each closing the app's oldest connection.
    Before: the app held all 64, and every desktop command got `agent_busy`."""
    accounts = {"work": default_account(auth_server.issuer),
                "asks": default_account(auth_server.issuer, confirm="first-use")}
    agent = make_agent(accounts=accounts, agent={"consent_timeout": 60}, start=False)
    agent.launcher = ["prlimit", "--nofile=320:320", "--"]
    agent.start()
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    app, report = app_client(agent, *["work"] * 64)
    desktop = []
    try:
        assert report.count("event:consent_required") == 16, report
        busy = [r for r in report if r.startswith("code:agent_busy:")]
        assert len(busy) == 48 and "sandboxed apps and forwarded hosts" in busy[0], report
        for n in range(48):
            s = agent.connect()
            s.sendall(json.dumps({"v": 1, "id": n, "op": "token", "account": "asks"}).encode() + b"\n")
            desktop.append(s)
        for s in desktop:
            assert b"consent_required" in s.makefile("rb").readline(), "a desktop request was not left waiting"
        # Full, every connection busy: the desktop's command takes the app's oldest connection.
        asked = pending(agent)
        assert sorted((q["account"], q["client"].startswith("flatpak:")) for q in asked) == [
            ("asks", False), ("work", True)], asked
        # The app reports each connection that closes: the 48 it was refused (in any order, as the kernel tells it),
        # then its oldest waiting one, which made room; no other waiting one.
        closed = read_until(app.stdout, "closed 0\n", 30).split()
        assert "0" in closed and not {str(n) for n in range(1, 16)} & set(closed), "the app's oldest connection made room"
        status = agent.authctl("status")
        assert status.returncode == 0, status.stderr
        assert agent.token("work"), "the desktop got no token"
        for s in desktop:
            s.setblocking(False)
            with pytest.raises(BlockingIOError):
                s.recv(1)  # still open, still waiting: no desktop connection was closed for another
    finally:
        for s in desktop:
            s.close()
        stop(app)


def test_allow_this_run_allows_only_the_instance_that_was_asked(make_agent, keyring, auth_server):
    """Two instances of one app ask at once: each is asked about by itself, and `approve --this-run` of the first
    serves that instance only; the second still waits, and is refused when denied. Before: the second joined the
    first's question and was served by its answer."""
    agent = make_agent(agent={"consent_timeout": 60})
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    other = "1111111111"
    first = sandboxed(agent, "token", "work")
    second = None
    try:
        read_until(first.stderr, "in a terminal", 30)
        second = sandboxed(agent, "token", "work", info=FLATPAK_INFO.replace(INSTANCE, other))
        read_until(second.stderr, "in a terminal", 30)
        questions = pending(agent)
        assert sorted(q["run"] for q in questions) == [f"instance {other}", f"instance {INSTANCE}"], questions
        [asked] = [q for q in questions if q["run"] == f"instance {INSTANCE}"]
        rc, output = run_in_terminal(agent, "approve", "--this-run", str(asked["id"]))
        assert rc == 0, output
        out, err = first.communicate(timeout=30)
        assert first.returncode == 0, err
        agent.remember(out.strip())
        assert [q["run"] for q in pending(agent)] == [f"instance {other}"], "the other instance was answered too"
        assert second.poll() is None, "the other instance got an answer"
        [left] = pending(agent)
        rc, output = run_in_terminal(agent, "deny", str(left["id"]))
        assert rc == 0, output
        out, err = second.communicate(timeout=30)
        assert second.returncode == 7 and out == "", err
    finally:
        stop(first)
        if second is not None:
            stop(second)
    reasons = [(e["outcome"], e["reason"], e["caller"].get("flatpak_instance")) for e in audit(agent)]
    assert reasons == [("granted", "approved", INSTANCE), ("denied", "denied_by_user", other)], reasons
