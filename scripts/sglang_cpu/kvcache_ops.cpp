// Registration of the two sgl-kernel CPU ops of csrc/cpu/kvcache.cpp, which SGLang 0.5.23 needs for
// a Llama on a CPU: copy_all_layer_kv_cache_cpu (kernels/ops/kvcache/cache_move.py imports it at
// load and calls it where KV moves between slots) and store_cache_cpu (memory_pool.py calls it only
// on CPUs with AMX; without AMX K/V are written in plain torch). The kernels
// themselves are sgl-kernel's csrc/cpu/kvcache.cpp, unmodified; the schemas are copied from its
// csrc/cpu/torch_extension_cpu.cpp (sgl-kernel 44806dc50, Apache-2.0), which registers ~150 ops
// whose sources need AMX or the whole library. Built by scripts/install_sglang_cpu.sh.
#include <ATen/ATen.h>
#include <Python.h>
#include <torch/all.h>
#include <torch/library.h>

#include <optional>

void store_cache_cpu(
    const at::Tensor& k,
    const at::Tensor& v,
    const at::Tensor& k_cache,
    const at::Tensor& v_cache,
    const at::Tensor& indices,
    std::optional<int64_t> row_dim);

void copy_all_layer_kv_cache_cpu(
    const at::Tensor& data_ptrs, const at::Tensor& strides, const at::Tensor& tgt_loc, const at::Tensor& src_loc);

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  m.def(
      "store_cache_cpu(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(a!) v_cache, Tensor indices, int? row_dim) -> "
      "()");
  m.impl("store_cache_cpu", torch::kCPU, &store_cache_cpu);
  m.def("copy_all_layer_kv_cache_cpu(Tensor data_ptrs, Tensor strides, Tensor tgt_loc, Tensor src_loc) -> ()");
  m.impl("copy_all_layer_kv_cache_cpu", torch::kCPU, &copy_all_layer_kv_cache_cpu);
}

PyMODINIT_FUNC PyInit_common_ops() {
  static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "common_ops", nullptr, 0, nullptr};
  return PyModule_Create(&module);
}
