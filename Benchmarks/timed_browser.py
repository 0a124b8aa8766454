"""Runs Tests/Fixtures/browser/fake_browser.py unchanged, except that the moment the callback request leaves for
the agent's loopback listener is recorded (time.monotonic_ns, i.e. CLOCK_MONOTONIC) in $BENCH_CALLBACK_T0_FILE."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "Tests", "Fixtures", "browser"))
import fake_browser  # noqa: E402

_deliver = fake_browser.deliver


def timed_deliver(b, url, note=""):
    path = os.environ.get("BENCH_CALLBACK_T0_FILE")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{time.monotonic_ns()}\n")
    return _deliver(b, url, note)


fake_browser.deliver = timed_deliver

if __name__ == "__main__":
    fake_browser.main()
