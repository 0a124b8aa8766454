"""DPoP keys held by the TPM (`dpop_key`, issue 56) end to end: the real agent and authctl, a real gnome-keyring, the
Django OAuth Toolkit fixture's DPoP layer (which verifies every proof: test_dpop.py), and a real software TPM
(swtpm, Debian's `swtpm` package) per test, reached through tpm2-tss's swtpm TCTI (`[agent] tpm_tcti`). The keyring
item must hold no private key: only the public point and the blob that TPM alone can load, so an item copied into
another agent with another TPM cannot be used at all. Skipped, and says why, without swtpm."""
import base64
import hashlib
import json
import shutil
import signal
import socket
import subprocess
import time

import pytest

from conftest import (CLIENT_ID, _private_bus, default_account, free_port, kill9_during_refresh, short_tmpdir,
                      stop_popen, wait_for)
from faultproxy import FaultProxy
from test_dpop import events, ref, resource

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

TPM_MARKER = "\x01dpop_tpm_es256\x01"
SWTPM = shutil.which("swtpm")


def free_pair() -> int:
    """A free port whose next one is free too (swtpm's data and control ports)."""
    while True:
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue


class SoftwareTPM:
    """One swtpm, its state in a directory of its own (the TPM's seeds: the same directory is the same TPM)."""

    def __init__(self):
        self.state = short_tmpdir("aa-tpm-")
        self.port = free_pair()
        self.proc = None

    @property
    def tcti(self) -> str:
        return f"swtpm:host=127.0.0.1,port={self.port}"

    def start(self):
        # The swtpm TCTI sends its power-on and start-up commands to the control port, the data port's next one.
        ctrl = self.port + 1
        self.proc = subprocess.Popen(
            [SWTPM, "socket", "--tpm2", "--server", f"type=tcp,port={self.port},bindaddr=127.0.0.1",
             "--ctrl", f"type=tcp,port={ctrl},bindaddr=127.0.0.1", "--tpmstate", f"dir={self.state}",
             "--flags", "not-need-init,startup-clear"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

        def listening():
            if self.proc.poll() is not None:
                raise AssertionError(f"swtpm exited: {self.proc.stderr.read().decode(errors='replace')}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", self.port)) == 0

        wait_for(listening, 10, "swtpm to listen")
        return self

    def stop(self):
        if self.proc is not None:
            stop_popen(self.proc)
            self.proc = None

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.state, ignore_errors=True)


@pytest.fixture
def tpms():
    """Factory: tpms() -> a started SoftwareTPM; all stopped and removed after the test."""
    if SWTPM is None:
        pytest.skip("swtpm is not installed (scripts/setup installs it)")
    made = []

    def factory():
        tpm = SoftwareTPM()
        made.append(tpm)
        return tpm.start()

    yield factory
    for tpm in made:
        tpm.cleanup()


@pytest.fixture(scope="module")
def dpop_server(tmp_path_factory):
    from test_dpop import start_server
    # Server nonces and PAR, as test_dpop's dpop_server: the nonce retry and the pushed dpop_jkt with a TPM key.
    server = start_server(tmp_path_factory, "as-tpm", AS_DPOP="optional", AS_DPOP_NONCE="1", AS_PAR="on")
    yield server
    server.stop()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def held_section(stored: str | None) -> str | None:
    """The key section of a keyring secret written for a TPM-held key, None for any other."""
    if not stored or not stored.startswith(TPM_MARKER):
        return None
    return stored[len(TPM_MARKER):].split("\x01", 1)[0]


def jkt(point: bytes) -> str:
    """RFC 7638 thumbprint of the P-256 public key x || y."""
    canonical = f'{{"crv":"P-256","kty":"EC","x":"{b64url(point[:32])}","y":"{b64url(point[32:])}"}}'
    return b64url(hashlib.sha256(canonical.encode()).digest())


def holds_private_scalar(point: bytes, blob: bytes) -> bool:
    """Whether any 32 bytes of `blob` are the private scalar of the public key `point`: the raw key, anywhere."""
    from cryptography.hazmat.primitives.asymmetric import ec
    order = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
    x = int.from_bytes(point[:32], "big")
    for i in range(len(blob) - 31):
        d = int.from_bytes(blob[i:i + 32], "big")
        if 0 < d < order and ec.derive_private_key(d, ec.SECP256R1()).public_key().public_numbers().x == x:
            return True
    return False


def tpm_agent(make_agent, server, tpm, place="tpm", **kwargs):
    return make_agent(server=server, work={"dpop_key": place}, agent={"tpm_tcti": tpm.tcti}, **kwargs)


def test_a_tpm_held_key_signs_the_sign_in_the_refresh_and_programs_proofs_and_the_item_holds_no_private_key(
        make_agent, keyring, dpop_server, tpms):
    tpm = tpms()
    agent = tpm_agent(make_agent, dpop_server, tpm)
    # The module's server is shared: only the events from here on are this test's.
    seen = {kind: len(events(dpop_server, kind)) for kind in ("token", "par_push")}
    agent.login("work")
    stored = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(stored)
    section = held_section(stored)
    assert section is not None, "the keyring item does not hold a TPM key"
    point_text, blob_text = section.split(".")
    point, blob = unb64url(point_text), unb64url(blob_text)
    (issued,) = [e for e in events(dpop_server, "token")[seen["token"]:] if e["grant"] == "authorization_code"]
    assert issued["token_type"] == "DPoP" and issued["access_bound"] and issued["refresh_bound"]
    (push,) = [e for e in events(dpop_server, "par_push")[seen["par_push"]:] if e["result"] == "accepted"]
    assert push["dpop_jkt"] == issued["jkt"], "the pushed request named another key than the one that redeemed the code"
    assert len(point) == 64 and jkt(point) == issued["jkt"], "the item's public key is not the one the tokens are bound to"
    # No private key material: no JWK `d`, no 32 bytes anywhere in the item that are the key's scalar.
    assert '"d"' not in stored and not holds_private_scalar(point, blob)
    status = agent.account_status("work")
    assert status["dpop"] == "access_token" and status["dpop_key"] == "tpm", status
    assert "held by the TPM" in agent.authctl("status").stdout

    # A program's proof (`token --header --url`) is the TPM's signature over the request, and the resource takes it.
    url = f"{dpop_server.base}/api/resource"
    lines = agent.authctl("token", "work", "--header", "--url", url)
    assert lines.returncode == 0, lines.stderr
    agent.remember(*(line.split(" ", 2)[-1] for line in lines.stdout.splitlines()))
    proof = next(line.split(" ", 1)[1] for line in lines.stdout.splitlines() if line.startswith("DPoP: "))
    header = json.loads(unb64url(proof.split(".")[0]))
    assert header["alg"] == "ES256" and "d" not in header["jwk"] and jkt(
        unb64url(header["jwk"]["x"]) + unb64url(header["jwk"]["y"])) == issued["jkt"]

    # A restart, then a refresh with rotation: signed by the same TPM key, and the rotated token keeps it.
    agent.restart()
    token = agent.token("work")
    refresh = [e for e in events(dpop_server, "token") if e["grant"] == "refresh_token"][-1]
    assert refresh["jkt"] == issued["jkt"] and refresh["access_token"] == ref(token)
    after = keyring.secret_tool_lookup("work", dpop_server.issuer)
    agent.remember(after)
    assert held_section(after) == section, "the rotated refresh token lost its key"
    assert ref(after.rsplit("\x01", 1)[-1]) == refresh["refresh_token"] != ref(stored.rsplit("\x01", 1)[-1])
    assert keyring.secret_tool_count("work") == 1


def copy_item(source, target, issuer: str, client_id: str):
    """What an infostealer does: the item, its secret and every attribute, read from one keyring and written into
    another."""
    secret = source.secret_tool_lookup("work", issuer, client_id)
    (item,) = source.secret_tool_attributes("work")
    attributes = [part for key, value in item.items() if key.startswith("attribute.")
                  for part in (key.removeprefix("attribute."), value)] + ["xdg:schema", item["schema"]]
    out = subprocess.run(["secret-tool", "store", "--label=auth-agent: work", *attributes],
                         input=secret, env=target._tool_env(), capture_output=True, text=True, timeout=15)
    assert out.returncode == 0, out.stderr
    return secret


def test_a_stolen_keyring_item_is_useless_with_another_tpm_and_the_first_agent_still_refreshes(
        make_agent, keyring, dpop_server, tpms):
    first = tpm_agent(make_agent, dpop_server, tpms())
    first.login("work")
    refreshes_before = len([e for e in events(dpop_server, "token") if e["grant"] == "refresh_token"])
    other_bus = _private_bus("aa-kr2-", with_keyring=True)
    stolen_keyring = next(other_bus)
    try:
        secret = copy_item(keyring, stolen_keyring, dpop_server.issuer, CLIENT_ID)
        first.remember(secret)
        # The thief's machine: its own agent, keyring and (fresh) TPM.
        thief = tpm_agent(make_agent, dpop_server, tpms(), bus=stolen_keyring)
        thief.remember(secret)
        result = thief.authctl("token", "work")
        assert result.returncode == 4 and "login_required" not in result.stdout, (result.returncode, result.stderr)
        assert "belongs to another TPM" in result.stderr, result.stderr
        assert len([e for e in events(dpop_server, "token") if e["grant"] == "refresh_token"]) == refreshes_before, \
            "the stolen refresh token reached the server"
        assert stolen_keyring.secret_tool_count("work") == 1, "the item is kept (the TPM may be the wrong one)"
        # Even with the key's public part, a thief has no proof to send: the first agent still refreshes.
        token = first.token("work", "--refresh")
        assert token
        thief.stop()
    finally:
        next(other_bus, None)


def test_a_tpm_that_stops_fails_requests_with_tpm_unavailable_keeps_the_sign_in_and_serves_again_once_back(
        make_agent, keyring, dpop_server, tpms):
    tpm = tpms()
    agent = tpm_agent(make_agent, dpop_server, tpm)
    agent.login("work")
    url = f"{dpop_server.base}/api/resource"
    tpm.stop()
    for args in (("token", "work", "--header", "--url", url), ("token", "work", "--refresh")):
        result = agent.authctl(*args, timeout=30)
        assert result.returncode == 5 and "tpm_unavailable" not in result.stdout, (args, result.returncode, result.stderr)
        assert "no TPM answers" in result.stderr or "did not answer" in result.stderr, result.stderr
    assert held_section(keyring.secret_tool_lookup("work", dpop_server.issuer)), "the sign-in was lost"
    assert agent.account_status("work")["last_error"]["code"] == "tpm_unavailable"
    tpm.start()  # the same state directory: the same TPM, with the same seeds
    result = agent.authctl("token", "work", "--header", "--url", url)
    assert result.returncode == 0, result.stderr
    agent.remember(*(line.split(" ", 2)[-1] for line in result.stdout.splitlines()))
    assert agent.token("work", "--refresh")


def test_a_wrong_tcti_refuses_a_tpm_sign_in_before_the_browser_and_auto_signs_in_with_a_software_key(
        make_agent, keyring, dpop_server):
    nothing = f"swtpm:host=127.0.0.1,port={free_pair()}"
    agent = make_agent(server=dpop_server, work={"dpop_key": "tpm"}, agent={"tpm_tcti": nothing})
    refused = agent.authctl("login", "work", timeout=60)
    assert refused.returncode == 5 and "no TPM answers" in refused.stderr and "dpop_key" in refused.stderr, \
        (refused.returncode, refused.stderr)
    assert agent.browser_runs() == 0, "the browser was started for a sign-in that cannot finish"
    assert keyring.secret_tool_lookup("work", dpop_server.issuer) is None
    doctor = json.loads(agent.authctl("doctor", "--json", timeout=60).stdout)
    (line,) = [c for c in doctor["checks"] if c["check"] == "tpm"]
    assert line["status"] == "fail" and nothing in line["message"], line
    agent.stop()

    auto = make_agent(server=dpop_server, work={"dpop_key": "auto"}, agent={"tpm_tcti": nothing})
    auto.login("work")
    status = auto.account_status("work")
    assert status["dpop"] == "access_token" and status["dpop_key"] == "software", status
    assert "in the keyring item" in auto.authctl("status").stdout
    assert "no TPM answered" in auto.log()
    doctor = json.loads(auto.authctl("doctor", "--json", timeout=60).stdout)
    (line,) = [c for c in doctor["checks"] if c["check"] == "tpm"]
    assert line["status"] == "warn", line


@pytest.mark.parametrize("when", ["before_request", "after_response"])
def test_kill9_during_a_refresh_keeps_the_tpm_key_with_the_token_and_the_restarted_agent_signs_with_it(
        make_agent, keyring, dpop_server, tpms, when):
    """test_dpop.py's kill -9 with the key in the TPM: killed before the server saw the refresh, or just after the
    agent got the answer, the item holds a token with the sign-in's TPM key (never one without the other), and the
    restarted agent, on the same swtpm (which still holds what the killed one had loaded), signs with it."""
    tpm = tpms()
    proxy = FaultProxy(dpop_server.base).start()
    try:
        agent = make_agent(server=dpop_server, work={"token_endpoint": proxy.base + "/o/token/", "dpop_key": "tpm"},
                           agent={"tpm_tcti": tpm.tcti})
        agent.login("work")
        jkt = [e for e in events(dpop_server, "token") if e["grant"] == "authorization_code"][-1]["jkt"]
        before = keyring.secret_tool_lookup("work", dpop_server.issuer)
        agent.remember(before)
        section = held_section(before)
        assert section

        kill9_during_refresh(agent, proxy, when)
        stored = keyring.secret_tool_lookup("work", dpop_server.issuer)
        agent.remember(stored)
        assert keyring.secret_tool_count("work") == 1 and held_section(stored) == section, \
            "the item after the kill does not hold the sign-in's TPM key"

        agent.start()
        tokens = len(events(dpop_server, "token"))
        result = agent.authctl("token", "work", "--refresh", timeout=60)
        refreshed = [e for e in events(dpop_server, "token")[tokens:] if e["grant"] == "refresh_token"]
        if when == "before_request":
            assert result.returncode == 0, (result.returncode, result.stderr)
        else:
            assert result.returncode in (0, 4), (result.returncode, result.stderr)
        if result.returncode == 0:
            agent.remember(result.stdout.strip())
            (refresh,) = refreshed
            assert refresh["jkt"] == jkt, "the restarted agent did not sign with the TPM key"
            after = keyring.secret_tool_lookup("work", dpop_server.issuer)
            agent.remember(after)
            assert held_section(after) == section
    finally:
        proxy.stop()


def test_dbus_proofs_are_the_tpms_and_a_stopped_tpm_is_a_named_error(make_agent, keyring, dpop_server, tpms):
    tpm = tpms()
    agent = tpm_agent(make_agent, dpop_server, tpm)
    agent.login("work")
    bound = [e for e in events(dpop_server, "token") if e["grant"] == "authorization_code"][-1]["jkt"]
    url = f"{dpop_server.base}/api/resource"

    def call(nonce: str = ""):
        return subprocess.run(
            ["gdbus", "call", "--session", "--dest", "dev.authagent.Agent", "--object-path", "/dev/authagent/Agent1",
             "--method", "dev.authagent.Agent1.GetAccessTokenForRequest", "--", "work", "0", "GET", url, nonce],
            env=dict(agent.env), capture_output=True, text=True, timeout=30)

    out = call()
    assert out.returncode == 0, out.stderr
    token_type, token, proof = [part.strip(" '") for part in out.stdout.strip("()\n").split(",")[:3]]
    agent.remember(token, proof)
    header = json.loads(unb64url(proof.split(".")[0]))
    assert token_type == "DPoP" and jkt(unb64url(header["jwk"]["x"]) + unb64url(header["jwk"]["y"])) == bound
    answer = resource(dpop_server, f"Authorization: DPoP {token}\nDPoP: {proof}")
    if answer.status_code == 401 and answer.headers.get("DPoP-Nonce"):  # the resource's nonce, when it asks for one
        out = call(answer.headers["DPoP-Nonce"])
        assert out.returncode == 0, out.stderr
        token_type, token, proof = [part.strip(" '") for part in out.stdout.strip("()\n").split(",")[:3]]
        agent.remember(token, proof)
        answer = resource(dpop_server, f"Authorization: DPoP {token}\nDPoP: {proof}")
    assert answer.status_code == 200, answer.text

    tpm.stop()
    refused = call()
    assert refused.returncode != 0 and "dev.authagent.Error.TpmUnavailable" in refused.stderr, refused.stderr


def test_a_tpm_that_hangs_is_answered_at_the_deadline_and_serves_again_once_it_answers(
        make_agent, keyring, dpop_server, tpms):
    """swtpm stopped with SIGSTOP: its socket takes the command and nothing answers. The caller gets tpm_unavailable at
    the TPM call's deadline (10 s), not never; once swtpm runs again the stuck call ends and the next one is served."""
    tpm = tpms()
    agent = tpm_agent(make_agent, dpop_server, tpm)
    agent.login("work")
    url = f"{dpop_server.base}/api/resource"
    tpm.proc.send_signal(signal.SIGSTOP)
    try:
        started = time.monotonic()
        result = agent.authctl("token", "work", "--header", "--url", url, timeout=60)
        waited = time.monotonic() - started
        assert result.returncode == 5 and "did not answer within 10 s" in result.stderr, (result.returncode, result.stderr)
        assert 9 < waited < 20, waited
    finally:
        tpm.proc.send_signal(signal.SIGCONT)
    result = agent.authctl("token", "work", "--header", "--url", url)
    assert result.returncode == 0, result.stderr
    agent.remember(*(line.split(" ", 2)[-1] for line in result.stdout.splitlines()))
