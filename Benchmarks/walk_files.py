"""Benchmarks/walk_files.sh's counting: the agent files a phase ran that its idle run did not run as often."""
import collections
import json
import sys

SOURCES, OUT = sys.argv[1], sys.argv[2]
# What a request sets off rather than what it runs: the front ends' pushes and the agent's own loops.
REACTIONS = {"AgentDBus", "AgentLifecycle", "SystemdSupport", "auth-agent"}


def counts(phase):
    data = json.load(open(f"{OUT}/{phase}.json"))
    return {(f["name"], f["filenames"][0]): f["count"] for f in data["data"][0]["functions"]
            if f["filenames"][0].startswith(SOURCES)}


for phase, idle in (("refresh", "idle-signed-in"), ("signin", "idle-empty")):
    ran, base = counts(phase), counts(idle)
    files = sorted({key[1][len(SOURCES):] for key, n in ran.items() if n > base.get(key, 0)})
    path = [f for f in files if f.split("/")[0] not in REACTIONS and f != "AuthCore/TokenBroker+Proactive.swift"]
    modules = collections.Counter(f.split("/")[0] for f in path)
    print(f"{phase}: {len(files)} files in {len({f.split('/')[0] for f in files})} modules; the request path alone "
          f"{len(path)} files in {len(modules)} modules ({', '.join(f'{m} {n}' for m, n in sorted(modules.items()))})")
    for f in files:
        print(f"   {f}{'' if f in path else '  (reaction)'}")
