"""Judging a replayed answer against its golden: bitwise diff, cache-hit rules, numerics parity.

Imports only `replay.utils`; never the golden store or the server."""
