"""Stops one thread of a process, by its name, and keeps it stopped until the process is gone: the other threads run
on. Run as root (the agent is not dumpable, so only CAP_SYS_PTRACE may trace it):

    python3 freeze_thread.py PID THREAD-NAME

PTRACE_SEIZE then PTRACE_INTERRUPT stop that thread alone (a SIGSTOP would stop the whole process). Prints
`frozen TID` once it is stopped; exits when the thread ends (its process killed)."""
import ctypes
import os
import sys

PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
# waitpid(2)'s __WALL: wait for a thread that is not a child process (Python's os module does not name it).
WALL = 0x40000000

libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long


def ptrace(request: int, tid: int):
    if libc.ptrace(request, tid, None, None) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"ptrace({request:#x}, {tid}): {os.strerror(error)}")


def main():
    pid, name = int(sys.argv[1]), sys.argv[2]
    tasks = os.listdir(f"/proc/{pid}/task")
    tid = next(int(t) for t in tasks if open(f"/proc/{pid}/task/{t}/comm").read().strip() == name)
    ptrace(PTRACE_SEIZE, tid)
    ptrace(PTRACE_INTERRUPT, tid)
    os.waitpid(tid, WALL)
    print(f"frozen {tid}", flush=True)
    # Never resumed: every later stop (a signal meant for it) leaves it stopped; the loop ends when it exits.
    while True:
        try:
            _, status = os.waitpid(tid, WALL)
        except ChildProcessError:
            return
        if os.WIFEXITED(status) or os.WIFSIGNALED(status):
            return


if __name__ == "__main__":
    main()
