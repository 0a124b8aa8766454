"""Issue 4's single-flight figure, exactly: 1,000 concurrent callers of an account with no valid cached token cause
exactly ONE request to the token endpoint, and all get its token. The fault proxy holds that one request until
every caller's request has reached the agent (counted in the agent's request log), so the count does not depend on
how fast this machine is; the real keyring and Django OAuth Toolkit do the rest."""
import json
import time

from conftest import read_replies, wait_for
from test_hostile import fault_proxy, proxied_agent  # noqa: F401 (fixture)
import pytest

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

CALLERS = 1000


def connect(agent):
    """A connection, retried while the listen backlog is full (EAGAIN on a Unix socket): the agent accepts fast,
    but 1,000 connects in a row outrun it on a loaded machine."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return agent.connect(timeout=60)
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def test_1000_callers_without_a_valid_token_cause_one_token_request(make_agent, keyring, auth_server, fault_proxy):
    proxy = fault_proxy
    agent = proxied_agent(make_agent, proxy)
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    # A restart empties the cache: the next token must come from a refresh with the stored refresh token.
    agent.restart()
    posts = sum(1 for hit in proxy.hits if hit.startswith("POST /o/token/"))
    proxy.set("hold")
    requests_before = agent.log().count("operation=token")
    conns = []
    try:
        for i in range(CALLERS):
            conns.append(connect(agent))
            conns[-1].sendall(json.dumps({"v": 1, "id": i, "op": "token", "account": "work"}).encode() + b"\n")
        assert proxy.reached.wait(30), "the refresh never reached the server"
        wait_for(lambda: agent.log().count("operation=token") - requests_before >= CALLERS, 60,
                 "all 1,000 requests at the agent while the refresh is held")
        proxy.release.set()
        replies = [read_replies(conn, 1, 60) for conn in conns]
    finally:
        for conn in conns:
            conn.close()
    tokens = set()
    for i, reply in enumerate(replies):
        assert len(reply) == 1 and reply[0]["id"] == i, f"caller {i}: {reply}"
        assert "result" in reply[0], reply[0]
        tokens.add(reply[0]["result"]["access_token"])
    agent.remember(*tokens, keyring.secret_tool_lookup("work", auth_server.issuer))
    requests = sum(1 for hit in proxy.hits if hit.startswith("POST /o/token/")) - posts
    print(f"single flight: {CALLERS} concurrent callers, {requests} token request(s) seen by the server, "
          f"{len(tokens)} distinct token(s) handed out")
    assert requests == 1
    assert len(tokens) == 1
    assert auth_server.introspect(tokens.pop())["active"] is True
    assert keyring.secret_tool_count("work") == 1
