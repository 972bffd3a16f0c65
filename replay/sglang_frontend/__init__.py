"""SGLang's own HTTP front end with the embedded engine as its scheduler process.

SGLang 0.5.23's HTTP server, TokenizerManager and DetokenizerManager run unchanged; the GPU
scheduler process is replaced by `scheduler_process.run_scheduler_process`, which runs the
embedded engine (its scheduler, radix cache, tiers, overlap scheduling and faults) and speaks
SGLang's ZMQ messages. Everything a client sees is then SGLang's own code.

Only `scheduler_process` and `outputs` import SGLang (installed by scripts/install_sglang.sh into
its own environment); the rest of this package works without it. The engine never imports this
package.
"""
