"""docs/INTEGRATIONS.md, "AI coding tools": the command each tool runs on the desktop for its key, asking as a grant
(`authctl token ACCOUNT --grant NAME`), run as printed and the way the tool runs it (issue 55, part 3).

Each recipe's blocks are read from the doc (readme_blocks.py), never retyped: the grant line is made with
test_grants.make_grant from its words; then Claude Code's `apiKeyHelper` runs with `/bin/sh -c` (as Claude Code runs
it), Codex's `[model_providers.<id>.auth]` as the TOML parses (`command` found on PATH, `args`, no shell, no stdin),
Docker Sandboxes' `sbx secret set ... --command` through `sh -c` (sbx runs it through the host shell), and each
wrapper script (Gemini CLI and aider have no such setting) in front of a stand-in for its tool, on PATH under the
tool's name, that prints the variable the wrapper set. Each must print exactly the token the desktop gets for the
account and nothing else, be audited `via grant:NAME`, and after `authctl grant --revoke NAME` fail with nothing on
stdout. Real agent, keyring and authorization server; one agent for all the recipes, to keep this file short."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import SYSTEM_PATH, bin_dir, default_account
from readme_blocks import recipe_block
from test_grants import audit, make_grant

pytestmark = pytest.mark.release  # also run against the installed package (scripts/test)

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "INTEGRATIONS.md"
SECTION = "## AI coding tools (a command on the desktop, as a grant)"


def grant_line(block: str) -> tuple[str, list[str]]:
    """The block's `authctl grant NAME ...` line, as the grant's name and the rest of its arguments."""
    lines = [line for line in block.splitlines() if line.startswith("authctl grant ")]
    assert len(lines) == 1, f"expected one `authctl grant` line in:\n{block}"
    words = shlex.split(lines[0])
    return words[2], words[3:]


def account_of(command: list[str]) -> str:
    """The ACCOUNT of `authctl token ACCOUNT --grant NAME ...` (the recipe's own words)."""
    at = command.index("token")
    return command[at + 1]


class Recipe:
    """One tool's recipe: the grant it makes, and how to run its command the way the tool does."""

    def __init__(self, tool: str, label: str):
        self.tool, self.label = tool, label
        self.grant, self.grant_args = grant_line(recipe_block(DOC, SECTION, label, 0))
        self.argv: list[str] = []          # what the tool executes
        self.stand_in: tuple[str, str] | None = None  # (program, variable) a wrapper execs
        self.script = ""                   # a wrapper's text, as the doc prints it
        self.account = ""

    def run(self, env: dict, cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run(self.argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=60)


def claude_code() -> Recipe:
    recipe = Recipe("Claude Code", "**Claude Code**")
    settings = json.loads(recipe_block(DOC, SECTION, recipe.label, 1))
    helper = settings["apiKeyHelper"]  # Claude Code: "executed in /bin/sh"
    recipe.argv = ["/bin/sh", "-c", helper]
    asked = shlex.split(helper)
    recipe.account = account_of(asked)
    assert asked[asked.index("--grant") + 1] == recipe.grant
    # The key must stay valid for the 5 minutes Claude Code keeps it by default.
    assert int(asked[asked.index("--min-valid") + 1]) > 300
    return recipe


def codex() -> Recipe:
    recipe = Recipe("Codex", "**Codex**")
    config = tomllib.loads(recipe_block(DOC, SECTION, recipe.label, 1))
    provider = config["model_providers"][config["model_provider"]]
    auth = provider["auth"]
    assert not {"env_key", "experimental_bearer_token", "requires_openai_auth"} & provider.keys()
    assert auth["timeout_ms"] >= 5000 and auth["refresh_interval_ms"] > 0
    recipe.argv = [auth["command"], *auth["args"]]  # Codex: no shell; a bare name is found on PATH
    recipe.account = account_of(recipe.argv)
    assert recipe.argv[recipe.argv.index("--grant") + 1] == recipe.grant
    # The token must stay valid for as long as Codex keeps it.
    assert int(recipe.argv[recipe.argv.index("--min-valid") + 1]) * 1000 > auth["refresh_interval_ms"]
    return recipe


def docker_sandboxes() -> Recipe:
    recipe = Recipe("Docker Sandboxes", "**Docker Sandboxes**")
    block = recipe_block(DOC, SECTION, recipe.label, 0)
    [line] = [line for line in block.splitlines() if line.startswith("sbx secret set ")]
    words = shlex.split(line)
    command = words[words.index("--command") + 1]
    recipe.argv = ["sh", "-c", command]  # sbx "runs the command through the host shell"
    asked = shlex.split(command)
    recipe.account = account_of(asked)
    assert asked[asked.index("--grant") + 1] == recipe.grant
    # The token must stay valid for as long as sbx keeps it (--refresh).
    refresh = words[words.index("--refresh") + 1]
    minutes = re.fullmatch(r"(\d+)m", refresh)
    assert minutes, f"--refresh {refresh}: expected minutes"
    assert int(asked[asked.index("--min-valid") + 1]) > int(minutes[1]) * 60
    return recipe


def wrapper(tool: str, label: str) -> Recipe:
    recipe = Recipe(tool, label)
    script = recipe_block(DOC, SECTION, label, 1)
    assert script.startswith("#!/bin/sh\n")
    exec_line = re.search(r"^(\w+)=\$key exec (\S+) \"\$@\"$", script, re.M)
    assert exec_line, f"{tool}: no `VAR=$key exec TOOL \"$@\"` line in:\n{script}"
    recipe.stand_in = (exec_line[2], exec_line[1])
    recipe.script = script
    key_line = re.search(r"^key=\$\((authctl token [^)]*)\) \|\| exit$", script, re.M)
    assert key_line, f"{tool}: no `key=$(authctl token ...) || exit` line in:\n{script}"
    asked = shlex.split(key_line[1])
    recipe.account = account_of(asked)
    assert asked[asked.index("--grant") + 1] == recipe.grant
    return recipe


def recipes() -> list[Recipe]:
    return [claude_code(), codex(), docker_sandboxes(), wrapper("Gemini CLI", "**Gemini CLI**"),
            wrapper("aider", "**aider**")]


def install_wrapper(recipe: Recipe, tools: Path) -> None:
    """The wrapper as the doc says to save it, and a stand-in for the tool it execs that prints what it was given
    (the variable on stdout, its arguments on stderr), both on PATH."""
    program, variable = recipe.stand_in
    stand_in = tools / program
    stand_in.write_text(f'#!/bin/sh\nprintf "%s\\n" "${variable}"\nprintf "args:%s\\n" "$*" >&2\n')
    script = tools / f"{program}-work"
    script.write_text(recipe.script)
    for path in (stand_in, script):
        path.chmod(0o755)
    recipe.argv = [str(script), "--from-the-user"]


def test_the_recipes_name_each_tools_setting():
    """Cheap, no agent: every recipe is where the test looks, and each asks as its own grant."""
    found = recipes()
    assert len({r.grant for r in found}) == len(found), "one grant per tool"
    text = DOC.read_text()
    for setting in ("`apiKeyHelper`", "`[model_providers.<id>.auth]`", "`sbx secret set SERVICE --command`",
                    "google-gemini/gemini-cli#26989", "Aider-AI/aider#5163"):
        assert setting in text


def test_each_tools_command_gets_its_grants_token_and_nothing_once_revoked(make_agent, auth_server, tmp_path):
    found = recipes()
    accounts = sorted({r.account for r in found})
    agent = make_agent(accounts={name: default_account(auth_server.issuer) for name in accounts})
    for name in accounts:
        agent.login(name)
    tools = tmp_path / "tools"
    tools.mkdir()
    # The tool's environment: the desktop session's, with authctl on PATH as the package installs it.
    env = {**agent.env, "PATH": f"{tools}:{bin_dir()}:{SYSTEM_PATH}"}

    for recipe in found:
        grant = make_grant(agent, recipe.grant, *recipe.grant_args)
        assert grant["accounts"] == [recipe.account], recipe.tool
        if recipe.stand_in:
            install_wrapper(recipe, tools)
        served = recipe.run(env, tmp_path)
        assert served.returncode == 0, f"{recipe.tool}: exit {served.returncode}: {served.stderr}"
        agent.remember(served.stdout.strip())
        assert served.stdout.count("\n") == 1 and served.stdout.endswith("\n"), f"{recipe.tool}: not one line"
        token = served.stdout.removesuffix("\n")
        assert token == agent.token(recipe.account), f"{recipe.tool}: not the account's token"
        if recipe.stand_in:
            assert "args:--from-the-user" in served.stderr, f"{recipe.tool}: the wrapper dropped the arguments"

    records = audit(agent)
    for recipe in found:
        via = [r for r in records if r["caller"].get("via") == f"grant:{recipe.grant}"]
        assert [(r["outcome"], r["account"]) for r in via] == [("granted", recipe.account)], recipe.tool
        assert via[0]["caller"].get("grant") == recipe.grant, recipe.tool

    listed = {g["name"]: g for g in agent.status_json()["grants"]}
    for recipe in found:
        assert listed[recipe.grant]["uses"] == 1, recipe.tool
        revoked = agent.authctl("grant", "--revoke", recipe.grant)
        assert revoked.returncode == 0, revoked.stderr
        refused = recipe.run(env, tmp_path)
        assert refused.returncode == 3, f"{recipe.tool}: exit {refused.returncode} after the revoke: {refused.stderr}"
        assert refused.stdout == "", f"{recipe.tool}: printed something after the revoke"
        assert f"grant '{recipe.grant}' is not served" in refused.stderr, refused.stderr
        if recipe.stand_in:
            assert "args:" not in refused.stderr, f"{recipe.tool}: the tool was started without a key"
    assert "grants" not in agent.status_json()
    # The desktop's own requests go on: the accounts were lent, not given away.
    for name in accounts:
        agent.remember(agent.token(name))
