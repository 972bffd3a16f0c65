"""Exits before listening, with the kind of last words a real server leaves in its log."""

import sys

print("starting fake server", flush=True)
print("RuntimeError: CUDA out of memory (fake). Tried to allocate 2.00 GiB", file=sys.stderr, flush=True)
sys.exit(3)
