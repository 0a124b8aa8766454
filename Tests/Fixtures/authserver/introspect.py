#!/usr/bin/env python
"""Usage: introspect.py TOKEN [STATE_DIR]   (STATE_DIR defaults to $AS_STATE_DIR)

Prints the RFC 7662 introspection JSON for TOKEN, authenticating as the
`introspector` client with HTTP Basic auth. Equivalent curl:
  curl -s -u introspector:introspector-secret -d token=TOKEN http://127.0.0.1:PORT/o/introspect/
"""
import json
import os
import sys
from pathlib import Path

import requests

if not 2 <= len(sys.argv) <= 3:
    sys.exit(__doc__)
state = Path(sys.argv[2] if len(sys.argv) == 3 else os.environ["AS_STATE_DIR"])
port = (state / "port").read_text().strip()
s = requests.Session()
s.trust_env = False
r = s.post(f"http://127.0.0.1:{port}/o/introspect/", data={"token": sys.argv[1]},
           auth=("introspector", "introspector-secret"), timeout=30)
if r.status_code != 200:
    sys.exit(f"introspect: HTTP {r.status_code}: {r.text[:200]}")
print(json.dumps(r.json(), indent=2, sort_keys=True))
