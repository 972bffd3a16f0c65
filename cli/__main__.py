"""`python -m cli` runs the `golden` command (same as the installed console script)."""

from cli.entry import main

main()
