"""SGLang 0.5.23's real server on a CPU, for testing only (docs/sglang-cpu.md).

`python -m replay.sglang_cpu SGLANG_ARGS...` starts SGLang's own HTTP server, Scheduler and
ModelRunner on the CPU after closing the two CPU gaps of 0.5.23's HiCache (patches.py). Nothing
of the tool imports this package: it is loaded only into a server started for CPU testing (the
`sglang-cpu-*` launch profiles), never on a GPU user's path. It imports nothing of the tool.
"""
