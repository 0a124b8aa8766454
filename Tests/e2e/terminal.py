"""Drives a full-screen terminal program (neomutt, aerc) on a pseudo-terminal, the way a person would: wait for
something, type keys, wait for the next thing. Every wait is bounded by one deadline."""
from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import termios
import time
from typing import Callable


def readable(screen: bytes) -> str:
    """The end of a terminal program's output with escape sequences and runs of blanks squeezed, for a message."""
    text = re.sub(r"\x1b(\[[0-9;?]*[A-Za-z]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][A-Z0-9]|[=>78])", " ",
                  screen.decode(errors="replace"))
    return re.sub(r"\s+", " ", text)[-2000:]


def drive(argv: list[str], env: dict, cwd, steps: list[tuple], timeout: float = 30,
          context: Callable[[], str] = lambda: "", status: int = 0) -> str:
    """Runs `argv` on a pseudo-terminal (80x24) that is its controlling terminal (aerc opens /dev/tty). For each
    (event, keys) of `steps` in turn: waits for the event (a text the program writes after the previous step, or a
    callable that turns true), then types `keys` (bytes, or a callable that may act first and returns them). Then
    waits for the program to exit with `status`. Returns all it wrote; failures show the screen and `context()`."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen(argv, env=dict(env, TERM="xterm"), cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                            start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
    os.close(slave)
    screen, mark, pending = b"", 0, list(steps)

    def failure(what: str) -> str:
        return f"{argv[0]} {what}; screen:\n{readable(screen)}\n{context()}"

    deadline = time.monotonic() + timeout
    try:
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, failure(f"never showed {pending[0][0]!r}" if pending else "did not exit")
            ready, _, _ = select.select([master], [], [], min(remaining, 0.2))
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: the program exited and closed the terminal
                    break
                if not chunk:
                    break
                screen += chunk
            if pending:
                event, keys = pending[0]
                if event() if callable(event) else event.encode() in screen[mark:]:
                    pending.pop(0)
                    os.write(master, keys() if callable(keys) else keys)
                    mark = len(screen)
        exited = proc.wait(timeout=max(1, deadline - time.monotonic()))
        assert not pending and exited == status, failure(f"exited with {exited}, waiting for {pending[:1]}")
        return screen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        os.close(master)
