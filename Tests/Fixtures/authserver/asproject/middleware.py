"""Appends `METHOD PATH STATUS DURATION_MS` (path only, never the query) to STATE_DIR/requests.log."""
import threading
import time

from django.conf import settings

_lock = threading.Lock()
_log = None


def _logfile():
    global _log
    if _log is None:
        _log = open(settings.STATE_DIR / "requests.log", "a", buffering=1, encoding="utf-8")
    return _log


class RequestLogMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        start = time.monotonic()
        response = self.get_response(request)
        ms = (time.monotonic() - start) * 1000
        line = f"{request.method} {request.path} {response.status_code} {ms:.1f}\n"
        with _lock:
            _logfile().write(line)
        return response
