"""Dies at once after printing what a careless server prints: its environment's API key and its
arguments, raw (no `--api-key X` shape a name-based redaction could catch)."""

import os
import sys

print(f"env key: {os.environ.get('GOLDEN_API_KEY', '(none)')}", flush=True)
print(f"args: {' '.join(sys.argv[1:])}", flush=True)
sys.exit(3)
