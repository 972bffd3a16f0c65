"""`python -m golden_cli` runs the `golden` command (same as the installed console script)."""

from golden_cli.entry import main

main()
