"""`[agent] store` end to end (issue 36, sections 2 and 3): with no Secret Service on the session bus (a private bus
with no gnome-keyring and no service activation), a sign-in by the browser or by the device grant lives in the
agent's memory only, and every surface says so (login, status, status --json, doctor, the journal); the agent then
does not exit idle under socket activation, and a restart loses the sign-in. A gnome-keyring started later on the
same bus gets the sign-in without a new one, and it survives a restart. `store = "memory"` never touches a keyring
that is there. A locked keyring is never taken for a missing one: test_errors.py
(`test_login_with_a_locked_keyring_fails_as_locked`, under the default `store = "auto"`)."""
import json
import subprocess
import time

import pytest

from conftest import pid_alive, wait_for
from test_device import approve, device_account, finish, start_login
from test_errors import _files_under
from test_lifecycle import NotifyListener

MEMORY_NOTICE = "no Secret Service answers; the sign-in is kept in memory until the agent stops"


def assert_no_token_in_files(agent, server):
    """Never a file: no token the server issued is in any file under the agent's HOME, config or runtime dirs."""
    secrets = server.issued_secrets()
    for rel in _files_under(agent.base):
        if rel == "agent.stderr":
            continue  # the log: the token canary checks it at teardown
        data = (agent.base / rel).read_bytes()
        for secret in secrets:
            assert secret.encode() not in data, f"a token is stored in {rel}"


def test_no_secret_service_keeps_a_browser_sign_in_in_memory_and_says_so(make_agent, bus_without_keyring, auth_server):
    agent = make_agent(bus=bus_without_keyring)
    before = agent.status_json()
    assert before["agent"]["keyring"] == "absent" and before["agent"]["store"] == "auto"
    assert before["accounts"][0]["signed_in"] is False, "no Secret Service and no sign-in in memory: not signed in"
    assert agent.authctl("token", "work").returncode == 4, "not signed in (login_required), not keyring_unavailable"

    login = agent.login("work")
    print(login.stdout)
    assert "Signed in to 'work'" in login.stdout
    assert ("The sign-in is kept in memory until the agent stops: start a Secret Service (gnome-keyring, KeePassXC) "
            "to keep it.") in login.stdout
    assert agent.log().count(MEMORY_NOTICE) == 1, agent.log()

    account = agent.account_status("work")
    assert account["signed_in"] is True and account["kept_in_memory"] is True, account
    assert "keyring_move_error" not in account
    text = agent.authctl("status").stdout
    print(text)
    assert "work — signed in, in memory only" in text, text
    assert "keyring: absent (no Secret Service on the session bus: sign-ins are kept in memory until the agent stops" in text
    assert "kept:" in text and "in the agent's memory until it stops" in text

    access = agent.token("work")
    assert auth_server.introspect(access)["active"] is True
    refreshed = agent.token("work", "--refresh")
    assert refreshed != access and auth_server.introspect(refreshed)["active"] is True
    assert agent.token("work", "--refresh") != refreshed, "a rotated refresh token held in memory is the one used next"
    assert agent.log().count(MEMORY_NOTICE) == 1, "a refresh of a held sign-in is not a new notice"

    doctor = agent.authctl("doctor", "--json")
    checks = json.loads(doctor.stdout)["checks"]
    keyring = next(c for c in checks if c["check"] == "keyring")
    store = next(c for c in checks if c["check"] == "store")
    assert keyring["status"] == "warn" and "kept in memory" in keyring["message"], keyring
    assert store["status"] == "warn" and store["account"] == "work", store
    assert "start a Secret Service" in store["hint"], store
    assert_no_token_in_files(agent, auth_server)

    # A restart loses it, and says so: the stopping agent names it in the journal; the new one says not signed in,
    # with no Secret Service to keep a sign-in.
    agent.restart()
    assert agent.log().count("stopping: the sign-in kept in memory only is lost") == 1, agent.log()
    after = agent.account_status("work")
    assert after["signed_in"] is False and "kept_in_memory" not in after, after
    token = agent.authctl("token", "work")
    assert token.returncode == 4 and "authctl login work" in token.stderr, (token.returncode, token.stderr)
    assert "sign-ins are kept in memory until the agent stops" in agent.authctl("status").stdout

    # Sign-out of a memory-only sign-in revokes it and forgets it.
    agent.login("work")
    held = agent.token("work")
    logout = agent.authctl("logout", "work", "--json")
    assert json.loads(logout.stdout)["had_refresh_token"] is True, logout.stdout
    assert auth_server.introspect(held)["active"] is False
    assert "kept_in_memory" not in agent.account_status("work")


def test_a_device_sign_in_without_a_secret_service_lives_in_memory(make_agent, bus_without_keyring, auth_server):
    agent = make_agent(bus=bus_without_keyring, accounts={"work": device_account(auth_server)})
    proc, user_code, _ = start_login(agent, "--device")
    agent.remember(user_code)
    approve(auth_server, user_code, "accept")
    rc, out, err = finish(proc)
    assert rc == 0, err
    assert "kept in memory until the agent stops" in out, out
    assert agent.account_status("work")["kept_in_memory"] is True
    assert auth_server.introspect(agent.token("work"))["active"] is True


def test_a_gnome_keyring_started_later_gets_the_sign_in_once_and_it_survives_a_restart(
        make_agent, bus_without_keyring, auth_server):
    agent = make_agent(bus=bus_without_keyring)
    agent.login("work")
    assert agent.account_status("work")["kept_in_memory"] is True
    access = agent.token("work")

    bus_without_keyring.start_keyring()  # the same bus: what logging in to a desktop session later does
    wait_for(lambda: "kept_in_memory" not in agent.account_status("work"), 20,
             "the agent to move the sign-in into the keyring that appeared")
    assert agent.log().count("the sign-in kept in memory is now in the keyring") == 1, agent.log()
    rt = bus_without_keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rt, "the moved sign-in is not in the keyring"
    agent.remember(rt)
    status = agent.status_json()
    assert status["agent"]["keyring"] == "available" and status["accounts"][0]["signed_in"] is True
    assert "in memory only" not in agent.authctl("status").stdout
    assert agent.token("work") == access, "moving the sign-in did not touch the cached access token"

    # Rotations now reach the keyring; and after a restart the sign-in is read back from it.
    agent.token("work", "--refresh")
    rotated = bus_without_keyring.secret_tool_lookup("work", auth_server.issuer)
    assert rotated and rotated != rt
    agent.remember(rotated)
    agent.restart()
    assert auth_server.introspect(agent.token("work", "--refresh"))["active"] is True
    assert bus_without_keyring.secret_tool_count("work") == 1


def test_a_keyring_that_appears_gets_the_sign_in_at_once_with_the_d_bus_api_off(make_agent, bus_without_keyring,
                                                                                 auth_server):
    """The Secret Service's arrival is heard by the keyring side itself: with the agent's D-Bus API off (here its
    name is taken by another program), a held sign-in still moves as soon as a keyring appears, well before the
    10 s retry (which is only for a keyring that refused)."""
    holder = subprocess.Popen(
        ["/usr/bin/python3", "-c", "import dbus, time; bus = dbus.SessionBus(); "
         "assert bus.request_name('dev.authagent.Agent') == 1; print('owned', flush=True); time.sleep(300)"],
        env=bus_without_keyring._tool_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "owned"
        agent = make_agent(bus=bus_without_keyring)
        wait_for(lambda: "the D-Bus API is off" in agent.log(), 10, "the agent to find its bus name taken")
        agent.login("work")
        assert agent.account_status("work")["kept_in_memory"] is True
        bus_without_keyring.start_keyring()
        wait_for(lambda: "kept_in_memory" not in agent.account_status("work"), 7,
                 "the sign-in to move into the keyring that appeared, without the D-Bus API")
        agent.remember(bus_without_keyring.secret_tool_lookup("work", auth_server.issuer))
        assert agent.log().count("the sign-in kept in memory is now in the keyring") == 1, agent.log()
    finally:
        holder.kill()
        holder.wait()


def test_store_memory_never_touches_a_keyring_that_is_there(make_agent, keyring, auth_server):
    agent = make_agent(agent={"store": "memory"})
    status = agent.status_json()
    assert status["agent"]["keyring"] == "unused" and status["agent"]["store"] == "memory"
    login = agent.login("work")
    assert "kept in memory until the agent stops" in login.stdout
    assert "(store = \"memory\")" in agent.log()
    assert auth_server.introspect(agent.token("work", "--refresh"))["active"] is True
    assert keyring.secret_tool_count("work") == 0, "store = memory wrote to the keyring"
    assert "keyring: unused (store = \"memory\"" in agent.authctl("status").stdout


def test_store_secret_service_has_no_memory_fallback(make_agent, bus_without_keyring, auth_server):
    agent = make_agent(bus=bus_without_keyring, agent={"store": "secret-service"})
    result = agent.authctl("login", "work")
    assert result.returncode == 5 and "Secret Service" in result.stderr, (result.returncode, result.stderr)
    assert 'store = "auto"' in result.stderr, result.stderr
    assert "kept_in_memory" not in agent.account_status("work")


def test_a_memory_only_sign_in_holds_off_the_idle_exit_until_a_keyring_takes_it(make_agent, bus_without_keyring):
    """Under socket activation with `idle_exit`, an agent holding a sign-in in memory only stays up (an exit would
    lose it) and says why on its STATUS line; once a Secret Service appears and takes the sign-in, it exits idle."""
    notify = NotifyListener()
    agent = make_agent(bus=bus_without_keyring, start=False, agent={"idle_exit": 2})
    try:
        with agent.socket_activated(("XDG_RUNTIME_DIR", "XDG_CONFIG_HOME", "DBUS_SESSION_BUS_ADDRESS", "NOTIFY_SOCKET",
                                     "BROWSER", "FAKE_BROWSER_PYTHON", "FAKE_BROWSER_LOG", "FAKE_BROWSER_MODE", "HOME",
                                     "LANG"), env={"NOTIFY_SOCKET": notify.path}):
            login = agent.login("work")
            assert "kept in memory" in login.stdout
            pid = agent.status_json()["agent"]["pid"]
            notify.wait("kept in memory only, so no idle exit: work")
            # The idle period passes: the agent says it stays, and stays.
            wait_for(lambda: "idle, but a sign-in lives in memory only" in agent.log(), 20,
                     "the idle exit to be held off")
            assert pid_alive(pid), "the agent exited idle and lost the sign-in"
            assert agent.account_status("work")["kept_in_memory"] is True

            bus_without_keyring.start_keyring()
            wait_for(lambda: not pid_alive(pid), 30, "the agent to exit idle once the keyring took the sign-in")
            assert "the sign-in kept in memory is now in the keyring" in agent.log()
            assert "idle; exiting until the next connection" in agent.log()
            assert bus_without_keyring.secret_tool_lookup("work", agent.server.issuer)
    finally:
        notify.close()


def test_a_sign_in_finished_while_the_keyring_locked_is_held_and_written_when_it_is_unlocked(
        make_agent, keyring, auth_server):
    """The keyring is unlocked when the sign-in starts (a locked one refuses the sign-in before the browser), and
    locks while the person signs in: the finished sign-in is not lost. It is kept in memory, says why, serves
    tokens, and is written to that keyring as soon as it is unlocked (its CollectionChanged signal)."""
    from test_paste import paste, sign_in_elsewhere, start_paste_login
    agent = make_agent()
    proc, url, _ = start_paste_login(agent)
    redirect = sign_in_elsewhere(agent, url)
    keyring.lock()
    paste(proc, redirect)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "kept in memory" in out, out
    account = agent.account_status("work")
    assert account["kept_in_memory"] is True and "locked" in account["keyring_move_error"], account
    assert "not written yet" in agent.authctl("status").stdout
    assert auth_server.introspect(agent.token("work"))["active"] is True
    assert keyring.secret_tool_count("work") == 0

    keyring.unlock()
    # gnome-keyring sends no signal for an unlock through its control socket: the agent finds it by asking again
    # (every 10 s).
    wait_for(lambda: "kept_in_memory" not in agent.account_status("work"), 30, "the unlocked keyring to get the sign-in",
             interval=0.5)
    stored = keyring.secret_tool_lookup("work", auth_server.issuer)
    assert stored, "the held sign-in was not written to the keyring after the unlock"
    agent.remember(stored)
    agent.restart()
    assert auth_server.introspect(agent.token("work", "--refresh"))["active"] is True
