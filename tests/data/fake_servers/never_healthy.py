"""Listens, but /health answers 503 forever: the launcher must give up at the startup timeout."""

from fake_http import serve

print("loading weights (fake): this will take forever", flush=True)
serve(health_status=503)
