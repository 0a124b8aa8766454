"""DPoP (RFC 9449) and pushed authorization requests (RFC 9126) end to end: the real agent and authctl, a real
gnome-keyring, and the Django OAuth Toolkit fixture with its DPoP and PAR layer (Tests/Fixtures/README.md), which
verifies every proof as RFC 9449 §4.3 says (signature with the header's key, htm, htu, iat, jti replay, nonce, ath,
the bound key) and records what it saw in STATE_DIR/events.jsonl. Its protected resource (/api/resource) takes a
DPoP-bound token only with a matching proof: `curl -H @<(authctl token ... --header --url ...)` must work there,
and the same token as Bearer must not. Each server check can fail: the fixture's self-test shows each refuses a
proof that skips or fakes its step; here the agent's proofs must pass them all."""
import hashlib
import json
import re
import subprocess
import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from conftest import (FAKE_BROWSER, KILL_MOMENTS, AuthServer, kill9_during_refresh, read_until, short_tmpdir,
                      wait_for)
from faultproxy import FaultProxy

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

# The keyring secret's marker names the key's algorithm: ES256, or EdDSA for a server that offers it and not ES256.
KEY_MARKERS = {"\x01dpop_es256\x01": "ES256", "\x01dpop_eddsa\x01": "EdDSA"}
URL_RE = re.compile(r"(http://127\.0\.0\.1:\d+/o/authorize/\?\S+)")


def ref(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


# Keyring secrets, tokens and header lines are never asserted on directly: a failed assert prints its operands (and
# the arguments of calls in it), and conftest's redaction covers only comparisons. Tests assert on these refs, or on
# a bool computed before the assert. (A keyring secret is "\x01dpop_es256\x01<private scalar>\x01<refresh token>", or
# "\x01dpop_eddsa\x01<Ed25519 seed>\x01<refresh token>", with the sign-in's ID token claims,
# "\x01id_claims\x01<base64url JSON>\x01", between the key and the token when there was an ID token.)
def key_ref(stored: str | None) -> str | None:
    """ref() of the DPoP key in a keyring secret (its marker and the key, which come first), None when it holds none.
    Tests compare these, so a failed assertion never prints a key or token."""
    if not stored or not key_algorithm(stored):
        return None
    return ref("\x01".join(stored.split("\x01")[:3]))


def key_algorithm(stored: str | None) -> str | None:
    """The algorithm a keyring secret's key marker names ("ES256", "EdDSA"), None when it holds no key."""
    return next((alg for marker, alg in KEY_MARKERS.items() if stored and stored.startswith(marker)), None)


def token_ref(stored: str | None) -> str | None:
    """ref() of the token in a keyring secret (after the key)."""
    return ref(stored.rsplit("\x01", 1)[-1]) if stored else None


def header_shape(lines: str) -> list[str]:
    """What header lines are, without their values: ["Authorization: DPoP", "DPoP:"] for a token and its proof."""
    return [" ".join(line.split(" ")[:2]) if line.startswith("Authorization:") else line.split(" ")[0]
            for line in lines.splitlines()]


def events(server, kind: str) -> list[dict]:
    path = server.state / "events.jsonl"
    if not path.exists():
        return []
    return [e for e in (json.loads(line) for line in path.read_text().splitlines()) if e["event"] == kind]


def start_server(tmp_path_factory, name: str, **env) -> AuthServer:
    server = AuthServer(tmp_path_factory.mktemp(name), extra_env=env)
    server.start()
    return server


@pytest.fixture(scope="module")
def dpop_server(tmp_path_factory):
    """DPoP with server nonces at the token endpoint and at the resource, and PAR: what the AT Protocol asks."""
    server = start_server(tmp_path_factory, "as-dpop", AS_DPOP="optional", AS_DPOP_NONCE="1", AS_RS_NONCE="1",
                          AS_PAR="on")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def google_like_server(tmp_path_factory):
    """Only the refresh token is bound (token_type Bearer), and a DPoP header on the push is refused."""
    server = start_server(tmp_path_factory, "as-google", AS_DPOP="optional", AS_DPOP_BIND="refresh", AS_PAR="on",
                          AS_PAR_DPOP_HEADER="refuse")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def strict_server(tmp_path_factory):
    """DPoP required on every token request, PAR required, request_uris that live 3 s."""
    server = start_server(tmp_path_factory, "as-strict", AS_DPOP="required", AS_DPOP_NONCE="1", AS_PAR="required",
                          AS_PAR_EXPIRES="3")
    yield server
    server.stop()


def resource(server, header_lines: str, method: str = "GET") -> requests.Response:
    headers = dict(line.split(": ", 1) for line in header_lines.strip().splitlines())
    return requests.request(method, f"{server.base}/api/resource", headers=headers, timeout=10,
                            proxies={"http": None, "https": None})


def proof_headers(agent, server, *extra, method: str = "GET"):
    result = agent.authctl("token", "work", "--header", "--method", method, "--url", f"{server.base}/api/resource",
                           *extra)
    assert result.returncode == 0, (result.returncode, result.stderr)
    lines = result.stdout.splitlines()
    agent.remember(*(line.split(" ", 2)[-1] for line in lines))
    return result.stdout


def test_a_dpop_sign_in_binds_the_tokens_and_curl_gets_the_resource_with_a_proof(make_agent, keyring, dpop_server):
    agent = make_agent(server=dpop_server)
    agent.login("work")

    # The push carried every parameter, dpop_jkt among them; the browser only client_id and request_uri.
    (push,) = [e for e in events(dpop_server, "par_push") if e["result"] == "accepted"]
    assert {"code_challenge", "state", "nonce", "redirect_uri", "dpop_jkt"} <= set(push["params"]), push
    # (/o/authorize/ is visited twice: before and after the login form.)
    uses = [e for e in events(dpop_server, "par_use") if e["result"] == "accepted"]
    assert uses and not any(e.get("ignored_params") for e in uses), uses
    # The code was bound to the key (dpop_jkt) and redeemed with a proof of that key, after a nonce round trip.
    (code,) = events(dpop_server, "code")
    (issued,) = [e for e in events(dpop_server, "token") if e["grant"] == "authorization_code"]
    assert issued["jkt"] == code["dpop_jkt"] == push["dpop_jkt"]
    assert issued["token_type"] == "DPoP" and issued["access_bound"] and issued["refresh_bound"]
    nonce_asked = [e for e in events(dpop_server, "proof") if e["result"] == "refused"]
    assert [e["error"] for e in nonce_asked] == ["use_dpop_nonce"], nonce_asked

    # The key is in the keyring item, in the same secret as the refresh token.
    stored = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(stored)
    stored_key, stored_token = key_ref(stored), token_ref(stored)
    assert stored_key, "the DPoP key is not stored with the refresh token"
    assert stored_token == issued["refresh_token"], "the item does not hold the refresh token the server issued"

    status = agent.account_status("work")
    assert status["dpop"] == "access_token", status
    token = json.loads(agent.authctl("token", "work", "--json").stdout)
    fields = sorted(token)
    assert token["token_type"] == "DPoP" and "dpop_proof" not in fields, fields
    assert "DPoP:" in agent.authctl("status").stdout

    # curl with the two header lines: the resource asks for its own nonce first (401 + DPoP-Nonce), and the proof
    # made with --dpop-nonce passes.
    first = resource(dpop_server, proof_headers(agent, dpop_server))
    assert first.status_code == 401 and "use_dpop_nonce" in first.headers.get("WWW-Authenticate", ""), first.text
    rs_nonce = first.headers["DPoP-Nonce"]
    # `--dpop-nonce=VALUE`: a nonce is base64url and may start with "-", which `--dpop-nonce VALUE` would read as
    # an option (the run that found it: exit 2, "Missing value for '--dpop-nonce'").
    lines = proof_headers(agent, dpop_server, f"--dpop-nonce={rs_nonce}")
    assert header_shape(lines) == ["Authorization: DPoP", "DPoP:"]
    # As a user types it: the two lines go straight from authctl to curl.
    curl = subprocess.run(["bash", "-c", 'curl -sS -H @<("$AUTHCTL" token work --header --url "$URL" --dpop-nonce="$N") "$URL"'],
                          env=dict(agent.env, AUTHCTL=str(agent.bins / "authctl"), N=rs_nonce,
                                   URL=f"{dpop_server.base}/api/resource"),
                          capture_output=True, text=True, timeout=20)
    assert curl.returncode == 0 and json.loads(curl.stdout).get("user") == "alice", (curl.stdout, curl.stderr)
    (accepted,) = [e for e in events(dpop_server, "resource") if e["result"] == "accepted"]
    assert accepted["scheme"].lower() == "dpop" and accepted["jkt"] == issued["jkt"]

    # A proof is good once: the same lines again are a replay. The same token as Bearer is refused; a GET's proof
    # does not do for a POST. (The resource sends a new nonce with every answer and keeps the last three.)
    nonce = [rs_nonce]

    def call(method: str = "GET", proof_method: str = "GET", lines: str | None = None):
        lines = lines or proof_headers(agent, dpop_server, f"--dpop-nonce={nonce[0]}", method=proof_method)
        answer = resource(dpop_server, lines, method=method)
        nonce[0] = answer.headers.get("DPoP-Nonce", nonce[0])
        return answer, lines

    ok, lines = call()
    assert ok.status_code == 200, ok.text
    replay, _ = call(lines=lines)
    assert replay.status_code == 401 and "invalid_dpop_proof" in replay.headers.get("WWW-Authenticate", "")
    bearer = requests.get(f"{dpop_server.base}/api/resource", timeout=10, proxies={"http": None, "https": None},
                          headers={"Authorization": f"Bearer {token['access_token']}"})
    assert bearer.status_code == 401, "a DPoP-bound token must not work as Bearer"
    wrong_method, _ = call(method="POST", proof_method="GET")
    assert wrong_method.status_code == 401, wrong_method.text
    post, _ = call(method="POST", proof_method="POST")
    assert post.status_code == 200, post.text

    # --header on a DPoP token without --url says how, instead of printing a useless line.
    bare = agent.authctl("token", "work", "--header")
    printed = bare.stdout != ""  # (a bool: what it printed would be a token)
    assert bare.returncode == 2 and "--url" in bare.stderr and not printed, (bare.returncode, bare.stderr)

    # The audit names the proofs' method and URL, never a proof.
    audit = json.loads(agent.authctl("audit", "--json").stdout)["entries"]
    assert any(e.get("dpop_proof_for") == f"POST {dpop_server.base}/api/resource" for e in audit), audit


def test_a_refresh_after_a_restart_uses_the_key_from_the_keyring_and_keeps_it_through_rotation(
        make_agent, keyring, dpop_server):
    agent = make_agent(server=dpop_server)
    agent.login("work")
    before = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(before)
    key, token_before = key_ref(before), token_ref(before)
    assert key, "no DPoP key in the keyring after the sign-in"
    agent.restart()
    token = agent.token("work")  # no cache after a restart: a refresh, with a proof of the stored key
    refreshes = [e for e in events(dpop_server, "token") if e["grant"] == "refresh_token"]
    signed_in = [e for e in events(dpop_server, "token") if e["grant"] == "authorization_code"][-1]
    assert refreshes and refreshes[-1]["jkt"] == signed_in["jkt"], "the refresh was not signed with the sign-in's key"
    assert refreshes[-1]["access_token"] == ref(token)
    after = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(after)
    key_after, token_after = key_ref(after), token_ref(after)
    assert token_after == refreshes[-1]["refresh_token"] != token_before, "the rotated token was not stored"
    assert key_after == key, "the rotated token lost its key"
    assert keyring.secret_tool_count("work") == 1


def test_refresh_token_only_binding_gives_bearer_tokens_and_says_so(make_agent, keyring, google_like_server):
    agent = make_agent(server=google_like_server)
    agent.login("work")
    (push,) = [e for e in events(google_like_server, "par_push") if e["result"] == "accepted"]
    assert push["dpop_header"] is False and push["dpop_jkt"], "dpop_jkt in the body, no DPoP header on the push"
    agent.restart()
    token = json.loads(agent.authctl("token", "work", "--json").stdout)
    agent.remember(token["access_token"])
    assert token["token_type"] == "Bearer"
    assert agent.account_status("work")["dpop"] == "refresh_token"
    # A Bearer token prints its one line, whatever --url says, and works as Bearer.
    lines = agent.authctl("token", "work", "--header", "--url", f"{google_like_server.base}/api/resource").stdout
    one_bearer_line = lines == f"Authorization: Bearer {token['access_token']}\n"  # (a bool: lines hold the token)
    assert one_bearer_line, header_shape(lines)
    assert resource(google_like_server, lines).status_code == 200
    refresh = [e for e in events(google_like_server, "token") if e["grant"] == "refresh_token"][-1]
    assert refresh["jkt"] and refresh["refresh_bound"] and not refresh["access_bound"]


def test_required_dpop_and_par_sign_in_and_a_plain_client_is_refused(make_agent, keyring, strict_server):
    agent = make_agent(server=strict_server, work={"dpop": True, "par": True})
    agent.login("work")
    assert agent.account_status("work")["dpop"] == "access_token"
    assert strict_server.introspect(agent.token("work"))["active"] is True
    # The same server with DPoP and PAR turned off in the account: a clear error before any browser opens.
    plain = make_agent(server=strict_server, work={"dpop": False, "par": False})
    result = plain.authctl("login", "work")
    assert result.returncode == 10 or result.returncode == 8, (result.returncode, result.stderr)
    assert "par = false" in result.stderr, result.stderr
    assert plain.browser_runs() == 0


def test_dpop_true_against_a_server_without_dpop_fails_before_the_browser(make_agent, keyring, auth_server):
    agent = make_agent(work={"dpop": True})
    result = agent.authctl("login", "work")
    assert result.returncode == 6 and "dpop_refused" in result.stderr or "does not offer DPoP" in result.stderr, \
        (result.returncode, result.stderr)
    assert agent.browser_runs() == 0


def test_a_program_refused_by_allowed_clients_gets_no_proof(make_agent, keyring, dpop_server):
    agent = make_agent(server=dpop_server, work={"allowed_clients": ["/usr/bin/git"]})
    # Signed in through login, which is the user's own act, not a token request.
    agent.login("work")
    audited = len(json.loads(agent.authctl("audit", "--json").stdout)["entries"])
    result = agent.authctl("token", "work", "--header", "--url", f"{dpop_server.base}/api/resource")
    printed = result.stdout != ""  # (a bool: what it printed would be a token and a proof)
    assert result.returncode != 0 and not printed, (result.returncode, printed)
    assert "does not serve" in result.stderr, result.stderr
    entries = json.loads(agent.authctl("audit", "--json").stdout)["entries"][audited:]
    assert [e["outcome"] for e in entries] == ["denied"], entries


def test_a_locked_keyring_is_reported_as_locked_and_keeps_key_and_token(make_agent, keyring, dpop_server):
    agent = make_agent(server=dpop_server)
    agent.login("work")
    stored = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(stored)
    key = key_ref(stored)
    assert key, "no DPoP key in the keyring after the sign-in"
    agent.restart()
    keyring.lock()
    result = agent.authctl("token", "work")
    assert result.returncode == 5 and "locked" in result.stderr, (result.returncode, result.stderr)
    keyring.unlock()
    agent.token("work")
    after = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(after)
    key_after = key_ref(after)
    assert key_after == key, "the key changed or was lost"


def test_dbus_gives_the_token_and_its_proof_in_one_call(make_agent, keyring, dpop_server):
    agent = make_agent(server=dpop_server)
    agent.login("work")
    url = f"{dpop_server.base}/api/resource"

    def call(nonce: str) -> tuple[str, str, str]:
        out = subprocess.run(
            ["gdbus", "call", "--session", "--dest", "dev.authagent.Agent", "--object-path", "/dev/authagent/Agent1",
             # `--`: a base64url nonce may start with '-', which gdbus would read as an option.
             "--method", "dev.authagent.Agent1.GetAccessTokenForRequest", "--", "work", "0", "GET", url, nonce],
            env=dict(agent.env), capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr
        token_type, token, proof = [part.strip(" '") for part in out.stdout.strip("()\n").split(",")[:3]]
        agent.remember(token, proof)
        return token_type, token, proof

    token_type, token, proof = call("")
    proof_parts = proof.count(".") + 1
    assert token_type == "DPoP" and proof_parts == 3, (token_type, proof_parts)
    first = resource(dpop_server, f"Authorization: DPoP {token}\nDPoP: {proof}")
    assert first.status_code == 401 and first.headers.get("DPoP-Nonce"), first.text  # the resource's nonce
    token_type, token, proof = call(first.headers["DPoP-Nonce"])
    answer = resource(dpop_server, f"Authorization: DPoP {token}\nDPoP: {proof}")
    assert answer.status_code == 200, answer.text


def test_a_plain_authorization_request_carries_dpop_jkt_without_par(make_agent, keyring, tmp_path_factory):
    """Without PAR, `dpop_jkt` goes in the browser's authorization request (RFC 9449 §10) and binds the code."""
    server = start_server(tmp_path_factory, "as-dpop-plain", AS_DPOP="optional", AS_PAR="off")
    try:
        agent = make_agent(server=server)
        agent.login("work")
        (code,) = events(server, "code")
        issued = [e for e in events(server, "token") if e["grant"] == "authorization_code"][-1]
        assert issued["jkt"] == code["dpop_jkt"] and issued["token_type"] == "DPoP"
        assert not events(server, "par_push")
    finally:
        server.stop()


def test_a_server_offering_only_eddsa_gets_an_ed25519_key_that_signs_the_refresh_after_a_restart(
        make_agent, keyring, tmp_path_factory):
    """One key per sign-in, ES256 unless the server offers no ES256: a server whose DPoP takes EdDSA alone gets an
    Ed25519 key (RFC 8037) under `dpop = "auto"`, stored with the refresh token under its own marker, and the
    refresh after a restart is signed with that key read back from the keyring."""
    server = start_server(tmp_path_factory, "as-dpop-eddsa", AS_DPOP="optional", AS_DPOP_ALGS="EdDSA",
                          AS_DPOP_NONCE="1", AS_PAR="off")
    try:
        metadata = requests.get(f"{server.issuer}/.well-known/openid-configuration", timeout=10,
                                proxies={"http": None, "https": None}).json()
        assert metadata["dpop_signing_alg_values_supported"] == ["EdDSA"], metadata
        agent = make_agent(server=server)
        agent.login("work")
        (code,) = events(server, "code")
        (issued,) = [e for e in events(server, "token") if e["grant"] == "authorization_code"]
        assert issued["jkt"] and issued["jkt"] == code["dpop_jkt"], (issued, code)
        assert issued["token_type"] == "DPoP" and issued["access_bound"] and issued["refresh_bound"], issued
        accepted = [e for e in events(server, "proof") if e["result"] == "accepted"]
        assert accepted and {(e["alg"], e["jkt"]) for e in accepted} == {("EdDSA", issued["jkt"])}, accepted

        stored = keyring.secret_tool_lookup("work", server.issuer)
        agent.remember(stored)
        algorithm, key, token_before = key_algorithm(stored), key_ref(stored), token_ref(stored)
        assert algorithm == "EdDSA" and key, (algorithm, key)
        assert token_before == issued["refresh_token"], "the item does not hold the refresh token the server issued"
        assert agent.account_status("work")["dpop"] == "access_token"

        agent.restart()
        proofs = len(events(server, "proof"))
        token = agent.token("work")  # no cache after a restart: a refresh, with a proof of the stored key
        (refresh,) = [e for e in events(server, "token") if e["grant"] == "refresh_token"]
        assert refresh["jkt"] == issued["jkt"], "the refresh was not signed with the sign-in's key"
        assert refresh["access_token"] == ref(token)
        since = [e for e in events(server, "proof")[proofs:] if e["result"] == "accepted"]
        assert since and {e["alg"] for e in since} == {"EdDSA"}, since
        after = keyring.secret_tool_lookup("work", server.issuer)
        agent.remember(after)
        assert key_algorithm(after) == "EdDSA" and key_ref(after) == key, "the rotated token lost its key"
        assert token_ref(after) == refresh["refresh_token"] != token_before, "the rotated token was not stored"
        assert keyring.secret_tool_count("work") == 1

        # A program's proof is signed with the same Ed25519 key, and the resource takes it.
        answer = resource(server, proof_headers(agent, server))
        assert answer.status_code == 200, answer.text
        (used,) = [e for e in events(server, "resource") if e["result"] == "accepted"]
        assert used["jkt"] == issued["jkt"]
    finally:
        server.stop()


@pytest.fixture
def dpop_proxy(dpop_server):
    proxy = FaultProxy(dpop_server.base).start()
    yield proxy
    proxy.stop()


@pytest.mark.parametrize("when", list(KILL_MOMENTS))
def test_kill9_during_a_rotating_dpop_refresh_never_parts_the_key_from_the_token(make_agent, keyring, dpop_server,
                                                                                 dpop_proxy, when):
    """test_hostile.py::test_kill9_during_rotating_refresh with DPoP and server nonces. The token endpoint is the
    fault proxy, which forwards the proof and the Host it was called with (the proof's htu, the endpoint the agent
    knows, is what the server checks) and relays DPoP-Nonce. SIGKILL (a) before the server saw the refresh, (b) after
    it rotated the refresh token but before the agent got the answer, (c) just after the agent got it. At every
    moment the keyring holds the refresh token with the sign-in's key, never one without the other; after the
    restart the refresh is signed with the key read back from the keyring (the server's proofs show the bound jkt)
    and works (a), or the rotated token was lost and the account says sign-in needed (b; c either way)."""
    proxy = dpop_proxy
    agent = make_agent(server=dpop_server, work={"token_endpoint": proxy.base + "/o/token/"})
    agent.login("work")
    signed_in = [e for e in events(dpop_server, "token") if e["grant"] == "authorization_code"][-1]
    jkt = signed_in["jkt"]
    assert jkt and signed_in["token_type"] == "DPoP" and signed_in["refresh_bound"], signed_in
    before = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(before)
    key = key_ref(before)
    assert key and keyring.secret_tool_count("work") == 1

    printed = kill9_during_refresh(agent, proxy, when)
    assert not printed or when == "after_response", "a token was printed although the agent died"
    # Killed at any moment: one item, the token in it with the sign-in's key.
    stored = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(stored)
    assert keyring.secret_tool_count("work") == 1
    stored_key = key_ref(stored)  # (values computed before the assert: its report shows no argument)
    assert stored_key == key, "the item after the kill does not hold the sign-in's key"

    agent.start()
    proofs, tokens, posts = len(events(dpop_server, "proof")), len(events(dpop_server, "token")), proxy.token_posts()
    result = agent.authctl("token", "work", "--refresh", timeout=60)
    new_proofs = events(dpop_server, "proof")[proofs:]
    refreshed = [e for e in events(dpop_server, "token")[tokens:] if e["grant"] == "refresh_token"]
    # The restarted agent knows no nonce yet: one use_dpop_nonce answer and one retry, no more.
    nonce_asked = [e for e in new_proofs if e.get("error") == "use_dpop_nonce"]
    assert len(nonce_asked) <= 1 and proxy.token_posts() - posts == 1 + len(nonce_asked), new_proofs
    accepted = [e for e in new_proofs if e["result"] == "accepted"]
    assert accepted and {e["jkt"] for e in accepted} == {jkt}, "the restarted agent did not sign with the stored key"
    if when == "before_request":
        assert result.returncode == 0, (result.returncode, result.stderr)
    elif when == "after_rotation":
        assert result.returncode == 4, (result.returncode, result.stderr)
    else:
        assert result.returncode in (0, 4), (result.returncode, result.stderr)
        print(f"kill after the response: restart outcome exit {result.returncode}")
    if result.returncode == 0:
        (refresh,) = refreshed
        served = ref(result.stdout.strip())
        assert refresh["jkt"] == jkt and refresh["refresh_bound"] and refresh["access_token"] == served, refresh
        rotated = keyring.secret_tool_lookup("work", dpop_server.issuer)
        agent.remember(rotated)
        rotated_key, rotated_token, stored_token = key_ref(rotated), token_ref(rotated), token_ref(stored)
        assert rotated_key == key, "the rotated token was stored without its key"
        assert rotated_token == refresh["refresh_token"] != stored_token
    else:
        assert "authctl login work" in result.stderr and not refreshed
        account = agent.account_status("work")
        assert account["signed_in"] is False and account["last_error"]["code"] == "login_required", account
    assert keyring.secret_tool_count("work") == (1 if result.returncode == 0 else 0)
    # No loop: asking again costs no token request once the outcome is known.
    posts = proxy.token_posts()
    again = agent.authctl("token", "work")
    assert again.returncode == result.returncode and proxy.token_posts() == posts, (again.returncode, again.stderr)


def request_uri(url: str) -> str:
    (value,) = parse_qs(urlsplit(url).query)["request_uri"]
    return value


def test_a_late_joiner_gets_a_fresh_pushed_request_and_the_expired_one_is_never_presented(make_agent, keyring,
                                                                                          strict_server):
    """RFC 9126 §4: a request_uri is single-use and expires (3 s on strict_server, which requires PAR). A first
    `authctl login` starts the sign-in (the browser stand-in starts and does nothing); once its request_uri has
    expired a second `authctl login` joins it and is given a URL with a new request_uri, pushed again with the same
    parameters; the sign-in completes in a browser on that URL and answers both. The server saw two pushes, and
    the expired request_uri was never presented to its authorization endpoint."""
    agent = make_agent(server=strict_server, work={"dpop": True, "par": True}, browser_mode="none")
    pushes, uses = len(events(strict_server, "par_push")), len(events(strict_server, "par_use"))
    first = agent.authctl_popen("login", "work")
    second = None
    try:
        url1 = URL_RE.search(read_until(first.stderr, "Waiting for the sign-in", 20)).group(1)
        wait_for(lambda: "DONE none" in agent.browser_log.read_text(), 10, "the browser stand-in to run")
        uri1 = ref(request_uri(url1))  # refs, like the server's events: a request_uri is never printed
        (push1,) = events(strict_server, "par_push")[pushes:]
        assert push1["result"] == "accepted" and push1["request_uri"] == uri1, push1
        # What is waited for here is time itself: the request_uri's expiry, by the server's clock (the event's time),
        # plus a second for the agent's clock, which started when the push's answer arrived.
        time.sleep(max(0.0, push1["t"] + push1["expires_in"] + 1 - time.time()))

        second = agent.authctl_popen("login", "work")
        url2 = URL_RE.search(read_until(second.stderr, "Waiting for the sign-in", 20)).group(1)
        uri2 = ref(request_uri(url2))
        assert uri2 != uri1, "the late joiner was sent to the expired request_uri"
        sent = set(parse_qs(urlsplit(url2).query))  # (names only: the URL holds a request_uri, never printed)
        assert sent == {"client_id", "request_uri"}, f"only client_id and request_uri, not {sorted(sent)}"
        assert agent.browser_runs() == 1, "joining the sign-in started a second browser"
        assert agent.account_status("work")["login_pending"] is True

        browser = subprocess.run([str(FAKE_BROWSER), url2], env=dict(agent.env, FAKE_BROWSER_MODE="login"),
                                 capture_output=True, text=True, timeout=60)
        assert browser.returncode == 0, browser.stderr
        for proc in (first, second):
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == 0 and "Signed in to 'work'" in out, (proc.returncode, err)
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)

    accepted = [e for e in events(strict_server, "par_push")[pushes:] if e["result"] == "accepted"]
    assert [e["request_uri"] for e in accepted] == [uri1, uri2], accepted
    assert accepted[0]["params"] == accepted[1]["params"], "the second push did not carry the same parameter names"
    presented = [e["request_uri"] for e in events(strict_server, "par_use")[uses:]]
    assert uri1 not in presented, "the expired request_uri was presented"
    assert uri2 in presented
    (done,) = [e for e in events(strict_server, "par_done") if e["request_uri"] == uri2]
    assert done["outcome"] == "code", done
    stored = keyring.secret_tool_lookup("work", strict_server.issuer)
    agent.remember(stored)
    stored_key = key_ref(stored)
    assert stored_key and keyring.secret_tool_count("work") == 1
    assert strict_server.introspect(agent.token("work"))["active"] is True


def test_a_device_sign_in_signs_every_poll_with_the_key_it_stores(make_agent, keyring, dpop_server):
    """RFC 9449 §5: a proof on every token request whatever the grant, so on each poll of a device sign-in (RFC
    8628): every poll the server saw carried a proof, all of the one key the tokens are bound to and the keyring item
    holds; the server's nonce was asked for once and then kept from answer to answer (§8.2), authorization_pending
    included."""
    from test_device import DEVICE_CLIENT, approve, device_account, finish, start_login

    agent = make_agent(server=dpop_server, accounts={"work": device_account(dpop_server)})
    proofs, posts = len(events(dpop_server, "proof")), dpop_server.token_posts()
    proc, user_code, _ = start_login(agent, "--device")
    wait_for(lambda: dpop_server.token_posts() - posts >= 3, 30, "the first polls")
    approve(dpop_server, user_code, "accept")
    rc, out, err = finish(proc)
    assert rc == 0 and "Signed in to 'work'" in out, (rc, err)

    seen = events(dpop_server, "proof")[proofs:]
    polls = dpop_server.token_posts() - posts
    assert len(seen) == polls, f"{polls} polls, {len(seen)} with a proof"
    (issued,) = [e for e in events(dpop_server, "token") if e["grant"].endswith(":device_code")]
    assert issued["token_type"] == "DPoP" and issued["access_bound"] and issued["refresh_bound"], issued
    accepted = [e for e in seen if e["result"] == "accepted"]
    assert {e["jkt"] for e in accepted} == {issued["jkt"]}, "the polls were not all signed with the one key"
    assert [e["error"] for e in seen if e["result"] == "refused"] == ["use_dpop_nonce"], seen
    stored = keyring.secret_tool_lookup("work", dpop_server.issuer, client_id=DEVICE_CLIENT)
    agent.remember(stored, user_code)
    stored_key, stored_token = key_ref(stored), token_ref(stored)
    assert stored_key and stored_token == issued["refresh_token"], "the item does not hold the token with its key"
    assert agent.account_status("work")["dpop"] == "access_token"
