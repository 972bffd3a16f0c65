# Sourced by install_sglang.sh (the front end) and install_sglang_cpu.sh (the real server on a
# CPU): the SGLang both install, and exactly what its HTTP front end imports (found by importing
# sglang.srt.entrypoints.http_server, the tokenizer and detokenizer managers until nothing was
# missing), pinned where SGLang pins. SGLang itself goes in with --no-deps: its own pins would
# pull the CUDA torch.
SGLANG_PIN="sglang==0.5.23"
SGLANG_FRONTEND_PACKAGES=(
    "transformers==5.19.0" "compressed-tensors==0.18.0" "xgrammar==0.2.7" "openai==2.8.0"
    "apache-tvm-ffi==0.1.11" "soundfile==0.13.1" "fastapi" "uvicorn" "uvloop" "python-multipart"
    "pyzmq" "msgspec" "pybase64" "psutil" "setproctitle" "einops" "dill" "pillow" "gguf"
    "partial-json-parser"
)
# Mooncake's transfer engine for prefill/decode disaggregation on a CPU (`mooncake_tcp`: its TCP
# transport, no RDMA; docs/topologies.md), installed by install_sglang_cpu.sh: the non-CUDA build
# of its wheel (the CUDA one, mooncake-transfer-engine, links libcudart.so.12 and libcuda.so.1 and
# cannot be imported without NVIDIA's driver); its engine.so links libibverbs.so.1 (Debian's
# libibverbs1) even for TCP.
MOONCAKE_PIN="mooncake-transfer-engine-non-cuda==0.3.13.post1"
# SGLang's router (a Rust load balancer with cache-aware routing) for the topologies
# (docs/topologies.md): installed by install_router.sh in its own venv, and carried to a GPU
# device by gpu_sglang/build_carry.sh --with-router (docs/gpu.md, "Two GPUs").
ROUTER_PIN="sglang-router==0.3.2"
