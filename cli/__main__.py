"""`python -m cli` runs the `golden` command (same as the installed console script)."""

from cli.main import app

app(prog_name="golden")
