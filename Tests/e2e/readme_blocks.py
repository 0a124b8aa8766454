"""Takes the config blocks of a recipe from the documentation itself, so a test runs exactly what a user copies.

`recipe_block(path, section, label)` finds the heading line `section` (e.g. "### Mail"), then the first paragraph
after it that starts with `label` (e.g. "**msmtp**"), and returns the fenced code block that follows. Moving the
recipes to another file or heading changes only the arguments. `fill_in` replaces the placeholders the text tells
the reader to replace."""
from __future__ import annotations

import re
from pathlib import Path


def recipe_block(path: Path, section: str, label: str, nth: int = 0) -> str:
    """The `nth` fenced block (0 = the first) after the paragraph starting with `label` in the `section` heading."""
    lines = Path(path).read_text().splitlines()
    level = len(section) - len(section.lstrip("#"))
    try:
        start = lines.index(section)
    except ValueError:
        raise AssertionError(f"{path}: no heading {section!r}") from None
    # The next heading of the same level or above; a `# comment` line inside a fenced block is not one.
    fenced, end = False, len(lines)
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("```"):
            fenced = not fenced
        elif not fenced and lines[i].startswith("#") and len(lines[i]) - len(lines[i].lstrip("#")) <= level \
                and lines[i].lstrip("#").startswith(" "):
            end = i
            break
    body = lines[start + 1:end]
    at = next((i for i, line in enumerate(body) if line.startswith(label)), None)
    assert at is not None, f"{path}: no paragraph starting with {label!r} under {section!r}"
    blocks, inside, current = [], False, []
    for line in body[at + 1:]:
        if line.startswith("```"):
            if inside:
                blocks.append("\n".join(current) + "\n")
                current, inside = [], False
                if len(blocks) > nth:
                    return blocks[nth]
            else:
                inside = True
            continue
        if inside:
            current.append(line)
        elif line.startswith("**"):
            break  # the next recipe's label: this one has no (more) blocks
    raise AssertionError(f"{path}: no fenced block #{nth} after {label!r} under {section!r}")


def fill_in(block: str, placeholders: dict[str, str]) -> str:
    """Replaces each placeholder that occurs (a literal string, not inside a longer word or host name)."""
    for placeholder, value in placeholders.items():
        pattern = r"(?<![\w.])" + re.escape(placeholder) + r"(?!\w)"
        block = re.sub(pattern, lambda _: value, block)
    return block
