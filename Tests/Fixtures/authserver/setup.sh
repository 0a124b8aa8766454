#!/bin/sh
# Usage: setup.sh VENV_DIR
# Creates VENV_DIR (if missing) and installs requirements.txt into it.
# Idempotent: pip is skipped when VENV_DIR/.requirements.sha256 matches.
set -eu
[ $# -eq 1 ] || { echo "usage: $0 VENV_DIR" >&2; exit 2; }
VENV=$1
HERE=$(cd "$(dirname "$0")" && pwd)
REQ="$HERE/requirements.txt"
STAMP="$VENV/.requirements.sha256"
HASH=$(sha256sum "$REQ" | cut -d' ' -f1)
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$HASH" ]; then
    exit 0
fi
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$REQ"
echo "$HASH" > "$STAMP"
