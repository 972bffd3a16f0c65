"""Healthy and passes the warm-up (a request of at most 4 tokens), then dies on the first real
request: the launcher must turn the client's connection error into 'the server exited'."""

import os
import sys

from fake_http import one_token, serve


def generate(body):
    if len(body.get("input_ids", [])) <= 4:
        return one_token(body)
    print("fatal: illegal memory access in fake kernel", file=sys.stderr, flush=True)
    os._exit(7)


serve(on_generate=generate)
