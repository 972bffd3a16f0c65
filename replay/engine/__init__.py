"""The embedded reference engine: a small seeded hybrid model served over SGLang's protocol.

Exact by construction (see docs/engine.md): a token's logprobs depend only on the tokens before
it, never on batching, prefill chunking, cache hits, thread count or CPU capability.
"""
