"""Unlocks (or, at a first login, creates) gnome-keyring's `login` collection the way its PAM module does: the
daemon's control socket, op GKD_CONTROL_OP_UNLOCK with the password. (Secret.Service.Unlock would need a prompt,
which fails without a display.) Imported by the e2e suite; run as a script inside the user-manager container,
where it reads the password on stdin (never argv) and finds the socket under $XDG_RUNTIME_DIR."""
import os
import socket
import sys

GKD_CONTROL_OP_UNLOCK = 1


def unlock(control: str, password: bytes, timeout: float = 10) -> bytes:
    """Sends the request; returns the daemon's 8-byte reply (length, then result code; 0 = unlocked)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(control)
        s.sendall(b"\0")  # the credentials byte
        body = GKD_CONTROL_OP_UNLOCK.to_bytes(4, "big") + len(password).to_bytes(4, "big") + password
        s.sendall((4 + len(body)).to_bytes(4, "big") + body)
        reply = b""
        while len(reply) < 8:
            chunk = s.recv(8 - len(reply))
            if not chunk:
                break
            reply += chunk
    return reply


def succeeded(reply: bytes) -> bool:
    return reply[4:8] == b"\0\0\0\0"


if __name__ == "__main__":
    answer = unlock(os.path.join(os.environ["XDG_RUNTIME_DIR"], "keyring", "control"), sys.stdin.buffer.read())
    sys.exit(0 if succeeded(answer) else 1)
