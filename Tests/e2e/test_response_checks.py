"""What the agent refuses, end to end with the real server (SECURITY.md 3, 4, 8, 9, 11): an `error=` response without
state, RFC 9207 `iss` mix-ups against a server that advertises the parameter, forged ID tokens (bad signature, wrong
audience, wrong nonce; re-signed with the fixture server's own key, so only the claim is wrong), a token reply naming
`access_token` twice, and discovery
documents that fail validation, each with its own error code. The fault proxy sits in front of the token endpoint or
serves the discovery document."""
import base64
import json
import socket
import time

import pytest
from jwcrypto import jwk, jwt

from conftest import assert_no_reply, default_account, read_replies, wait_for
from faultproxy import FaultProxy


@pytest.fixture
def proxy(auth_server):
    p = FaultProxy(auth_server.base).start()
    yield p
    p.stop()


def _get(port: int, target: bytes) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n" % port)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1])


def test_error_response_without_state_is_ignored(make_agent, keyring):
    """SECURITY.md 9: `error=` is acted on only with a valid state; without one the sign-in keeps waiting."""
    agent = make_agent(browser_mode="none")
    s = agent.connect(timeout=30)
    try:
        s.sendall(b'{"v":1,"id":1,"op":"login","account":"work"}\n')
        (event,) = read_replies(s, 1, 15)
        port = int(event["event"]["redirect_uri"].split(":")[2].split("/")[0])
        assert _get(port, b"/oauth2/callback/work?error=access_denied") == 400
        assert _get(port, b"/oauth2/callback/work?error=access_denied&error_description=%3Cscript%3E") == 400
        assert _get(port, b"/oauth2/callback/work?error=access_denied&state=") == 400
        assert agent.account_status("work")["login_pending"] is True
        assert_no_reply(s, "the sign-in ended on an error response without state")
    finally:
        s.close()
    assert "missing or repeated state" in agent.log()


def test_iss_mismatch_and_missing_iss_are_rejected_when_the_server_advertises_rfc9207(make_agent, keyring,
                                                                                       iss_auth_server):
    """SECURITY.md 8: the fixture server advertises `authorization_response_iss_parameter_supported`; the browser
    first delivers the real code with another `iss`, then without `iss`: both refused, the real response wins."""
    agent = make_agent(server=iss_auth_server, browser_mode="wrong-iss")
    result = agent.authctl("login", "work")
    assert result.returncode == 0, result.stderr
    log = agent.browser_log.read_text()
    assert "GET /oauth2/callback/work -> 400 (callback, wrong iss)" in log, log
    assert "GET /oauth2/callback/work -> 400 (callback, no iss)" in log, log
    assert "DONE wrong-iss callback=200" in log
    assert "iss does not match the issuer (RFC 9207)" in agent.log()
    assert "missing iss (RFC 9207)" in agent.log()
    # Only the real response reached the token endpoint: one exchange.
    assert iss_auth_server.token_posts() == 1
    agent.remember(keyring.secret_tool_lookup("work", iss_auth_server.issuer))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _forger(server, how: str):
    """A rewrite for the token response: replaces its id_token with a forged one."""
    key = jwk.JWK.from_pem((server.state / "oidc-rsa.pem").read_bytes())

    def rewrite(body: bytes) -> bytes:
        reply = json.loads(body)
        token = reply.get("id_token")
        if not token:
            return body
        head, payload, signature = token.split(".")
        if how == "signature":
            sig = bytearray(_unb64(signature))
            sig[len(sig) // 2] ^= 0xFF
            reply["id_token"] = f"{head}.{payload}.{_b64(bytes(sig))}"
        else:
            claims = json.loads(_unb64(payload))
            if how == "audience":
                claims["aud"] = "someone-else"
            elif how == "nonce":
                claims["nonce"] = "forged-nonce"
            elif how == "subject":
                claims["sub"] = "someone-else"
            forged = jwt.JWT(header=json.loads(_unb64(head)), claims=claims)
            forged.make_signed_token(key)
            reply["id_token"] = forged.serialize()
        return json.dumps(reply).encode()

    return rewrite


@pytest.mark.parametrize("how", ["signature", "audience", "nonce"])
def test_forged_id_tokens_are_rejected(make_agent, keyring, auth_server, proxy, how):
    """SECURITY.md 4: the real server's ID token with a broken signature, or re-signed with the server's own key but
    naming another audience or another nonce, fails the sign-in with `invalid_id_token` and stores nothing."""
    agent = make_agent(work={"token_endpoint": proxy.base + "/o/token/"})
    proxy.rewrite("/o/token/", _forger(auth_server, how))
    result = agent.authctl("login", "work")
    assert result.returncode == 6, (how, result.returncode, result.stderr)
    assert agent.account_status("work")["last_error"]["code"] == "invalid_id_token"
    expected = {"signature": "signature", "audience": "(aud)", "nonce": "nonce"}[how]
    assert expected in result.stderr.lower(), result.stderr
    assert keyring.secret_tool_count("work") == 0, "a refresh token was stored although the ID token was forged"


def test_a_refreshed_id_token_naming_another_user_is_refused_after_a_restart(make_agent, keyring, auth_server, proxy):
    """SECURITY.md 4, OIDC Core §12.2: the sign-in's ID token claims are kept with the refresh token in the keyring,
    so a restarted agent still compares a refreshed ID token with them: the server's own, unaltered, passes (its
    `iss`, `sub`, `aud`, `auth_time` are the sign-in's); one re-signed with the server's key naming another `sub`
    fails the refresh with `invalid_id_token`, and the rotated refresh token is kept all the same."""
    agent = make_agent(work={"token_endpoint": proxy.base + "/o/token/"})
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    agent.restart()
    assert agent.authctl("token", "work", "--refresh").returncode == 0, agent.log()[-2000:]
    before = keyring.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(before)

    agent.restart()
    proxy.rewrite("/o/token/", _forger(auth_server, "subject"))
    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 6, (result.returncode, result.stderr)
    assert agent.account_status("work")["last_error"]["code"] == "invalid_id_token"
    assert "subject" in result.stderr, result.stderr
    rotated = keyring.secret_tool_lookup("work", auth_server.issuer)
    agent.remember(rotated)
    assert rotated not in (None, before), "the rotated refresh token was not kept"
    assert auth_server.refresh_token_works(rotated), "the kept refresh token is the one the server issued"


def test_token_reply_naming_access_token_twice_is_refused(make_agent, keyring, proxy):
    """SECURITY.md 12: the real server's token reply with a second `access_token` member in front (parsers differ on
    which one counts) fails the sign-in with `invalid_token_response`, names the member but neither value, and stores
    nothing."""
    agent = make_agent(work={"token_endpoint": proxy.base + "/o/token/"})

    def duplicate(body: bytes) -> bytes:
        assert body.startswith(b"{") and b'"access_token"' in body, body[:40]
        return b'{"access_token": "second-access-token", ' + body[1:]

    proxy.rewrite("/o/token/", duplicate)
    result = agent.authctl("login", "work")
    assert result.returncode == 6, (result.returncode, result.stderr)
    assert "'access_token' more than once" in result.stderr, result.stderr
    assert "second-access-token" not in result.stderr + result.stdout
    assert agent.account_status("work")["last_error"]["code"] == "invalid_token_response"
    assert keyring.secret_tool_count("work") == 0, "a refresh token was stored from an ambiguous token reply"


def _discovery(proxy, **overrides) -> bytes:
    issuer = proxy.base + "/o"
    doc = {"issuer": issuer, "authorization_endpoint": issuer + "/authorize/", "token_endpoint": issuer + "/token/",
           "jwks_uri": issuer + "/.well-known/jwks.json", "code_challenge_methods_supported": ["S256"]}
    doc.update(overrides)
    return json.dumps(doc).encode()


@pytest.mark.parametrize("case,code,words", [
    ("issuer", "issuer_mismatch", "names issuer"),
    ("plain-only", "pkce_unsupported", "S256"),
    ("http-endpoint", "insecure_endpoint", "https"),
])
def test_untrustworthy_metadata_has_its_own_code(make_agent, keyring, auth_server, proxy, case, code, words):
    """SECURITY.md 11: the discovery document (served by the proxy as the account's issuer) is refused before any
    browser starts, and each reason has its own stable code."""
    doc = {
        "issuer": _discovery(proxy, issuer="https://evil.example/o"),
        "plain-only": _discovery(proxy, code_challenge_methods_supported=["plain"]),
        "http-endpoint": _discovery(proxy, token_endpoint="http://auth.example/token/"),
    }[case]
    proxy.script("/o/.well-known/", [(200, "application/json", doc)] * 4)
    agent = make_agent(accounts={"work": default_account(proxy.base + "/o")})
    result = agent.authctl("login", "work")
    assert result.returncode == 6, (case, result.returncode, result.stderr)
    assert words in result.stderr, result.stderr
    assert agent.account_status("work")["last_error"]["code"] == code
    assert agent.browser_runs() == 0, "a browser started although the metadata was refused"


def test_a_refreshed_id_token_after_the_same_user_signed_in_again_elsewhere_is_accepted(make_agent, keyring,
                                                                                         auth_server):
    """OIDC Core §12.2 against the real server: Django OAuth Toolkit sends as `auth_time` the user's latest login
    anywhere. After the same person signs in a second account, the first account's refreshed ID token names a later
    `auth_time` than its sign-in: the same person authenticating again, accepted (only an earlier one is refused)."""
    agent = make_agent(accounts={"work": default_account(auth_server.issuer),
                                 "personal": default_account(auth_server.issuer)})
    agent.login("work")
    agent.remember(keyring.secret_tool_lookup("work", auth_server.issuer))
    signed_in = time.time()
    wait_for(lambda: time.time() >= signed_in + 1.1, 5, "a second to pass (auth_time is in whole seconds)")
    agent.login("personal")
    agent.remember(keyring.secret_tool_lookup("personal", auth_server.issuer))
    result = agent.authctl("token", "work", "--refresh")
    assert result.returncode == 0, (result.returncode, result.stderr)
    agent.remember(result.stdout.strip(), keyring.secret_tool_lookup("work", auth_server.issuer))
    assert agent.account_status("work").get("last_error") is None
