#!/bin/sh
# Usage: serve.sh VENV_DIR STATE_DIR [PORT]   (runs in the foreground)
set -eu
[ $# -ge 2 ] && [ $# -le 3 ] || { echo "usage: $0 VENV_DIR STATE_DIR [PORT]" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
VENV=$1; shift
exec "$VENV/bin/python" "$HERE/serve.py" "$@"
