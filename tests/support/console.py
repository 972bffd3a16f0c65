"""Reading console output as a CI user would copy it: a shell command printed over continuation
lines (each but the last ending in ` \\`) joined back into one line."""

from __future__ import annotations


def joined_commands(stdout: str, prefix: str = "rerun") -> list[str]:
    """Every printed command whose first line starts with `prefix`, its lines joined."""
    commands: list[str] = []
    lines = stdout.splitlines()
    for at, line in enumerate(lines):
        if not line.startswith(prefix):
            continue
        words = []
        for part in lines[at:]:
            words.append(part.removesuffix(" \\").strip())
            if not part.endswith(" \\"):
                break
        commands.append(" ".join(words))
    return commands


def verdict_text(stdout: str) -> str:
    """The verdict (`PASS: ...` or `FAIL: ...`, the last thing printed) with its folded lines
    joined back into the one line the report's verdict is."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith(("PASS", "FAIL")))
    return " ".join(line.strip() for line in lines[start:])


def flattened(text: str) -> str:
    """Console output with its whitespace runs as single spaces: a phrase reads the same whether
    or not a verdict or note was folded across lines at 120 columns."""
    return " ".join(text.split())
