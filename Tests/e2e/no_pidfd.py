"""Runs a program as on a kernel without SO_PEERPIDFD (Linux < 6.5): a seccomp filter makes
getsockopt(SOL_SOCKET, SO_PEERPIDFD) fail with ENOPROTOOPT, which is what such kernels answer, and lets every other
call through. Usage: /usr/bin/python3 no_pidfd.py PROGRAM ARGS... (needs python3-seccomp; the release binary is
unchanged: nothing in it knows about this)."""
import errno
import os
import socket
import sys

import seccomp

SO_PEERPIDFD = 77

rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
rules.add_rule(seccomp.ERRNO(errno.ENOPROTOOPT), "getsockopt",
               seccomp.Arg(1, seccomp.EQ, socket.SOL_SOCKET), seccomp.Arg(2, seccomp.EQ, SO_PEERPIDFD))
rules.load()
os.execv(sys.argv[1], sys.argv[1:])
