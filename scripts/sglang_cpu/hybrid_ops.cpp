// Registration of the sgl-kernel CPU ops SGLang 0.5.23 reaches for a Gated DeltaNet hybrid
// (Qwen3-Next) on a CPU: the chunked prefill and the recurrent decode step of the delta rule
// (mamba/fla.cpp; layers/attention/linear/kernels/gdn_triton.py), the gating (fla.cpp;
// gdn_backend.py), the causal conv1d of prefill and decode (mamba/conv.cpp; sgl_kernel/mamba.py),
// and the gated RMSNorm and L2 norm (norm.cpp; fla/fused_norm_gate.py). The kernels are
// sgl-kernel's sources, unmodified; the schemas are copied from its csrc/cpu/torch_extension_cpu.cpp
// (sgl-kernel 44806dc50, Apache-2.0). These kernels have AVX-512 paths only (a scalar build stops
// with "scalar path not implemented!"), so scripts/sglang_cpu/build_kernel.py compiles this file
// only on a CPU with AVX-512 BF16. kvcache_ops.cpp holds the module's init.
#include <ATen/ATen.h>
#include <torch/all.h>
#include <torch/library.h>
#include <optional>
#include <tuple>

at::Tensor l2norm_cpu(at::Tensor& input, double eps);
at::Tensor fused_rmsnorm_gated_cpu(at::Tensor& input, at::Tensor& weight, at::Tensor& gate, double eps);
std::tuple<at::Tensor, at::Tensor> chunk_gated_delta_rule_cpu(
    const at::Tensor& query, const at::Tensor& key, const at::Tensor& value, const at::Tensor& g,
    const at::Tensor& beta, const at::Tensor& initial_state, bool output_final_state,
    const at::Tensor& cu_seqlens, bool head_first, bool use_qk_l2norm_in_kernel,
    const at::Tensor& initial_state_indices, double eps);
at::Tensor causal_conv1d_weight_pack(const at::Tensor& weight);
at::Tensor causal_conv1d_fwd_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& conv_states, const std::optional<at::Tensor>& query_start_loc,
    const std::optional<at::Tensor>& cache_indices, const std::optional<at::Tensor>& has_initial_state,
    bool silu_activation, int64_t pad_slot_id, bool is_vnni);
at::Tensor causal_conv1d_update_cpu(const at::Tensor& x, const at::Tensor& conv_states, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, bool silu_activation, const std::optional<at::Tensor>& cache_seqlens,
    const std::optional<at::Tensor>& conv_state_indices, int64_t pad_slot_id, bool is_vnni);
at::Tensor fused_sigmoid_gating_delta_rule_update_cpu(const at::Tensor& A_log, const at::Tensor& dt_bias,
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& a, const at::Tensor& b,
    at::Tensor& initial_state_source, const at::Tensor& initial_state_indices, const at::Tensor& cu_seqlens,
    bool use_qk_l2norm_in_kernel, double softplus_beta, double softplus_threshold);
std::tuple<at::Tensor, at::Tensor> fused_gdn_gating_cpu(const at::Tensor& A_log, const at::Tensor& a,
    const at::Tensor& b, const at::Tensor& dt_bias);

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  m.def("l2norm_cpu(Tensor input, float eps) -> Tensor");
  m.impl("l2norm_cpu", torch::kCPU, &l2norm_cpu);
  m.def("fused_rmsnorm_gated_cpu(Tensor input, Tensor weight, Tensor gate, float eps) -> Tensor");
  m.impl("fused_rmsnorm_gated_cpu", torch::kCPU, &fused_rmsnorm_gated_cpu);
  m.def(
      "chunk_gated_delta_rule_cpu(Tensor query, Tensor key, Tensor value, Tensor g, Tensor beta, "
      "Tensor initial_state, bool output_final_state, Tensor cu_seqlens, bool head_first, "
      "bool use_qk_l2norm_in_kernel, Tensor initial_state_indices, float eps=1e-6) -> (Tensor, Tensor)");
  m.impl("chunk_gated_delta_rule_cpu", torch::kCPU, &chunk_gated_delta_rule_cpu);
  m.def("causal_conv1d_weight_pack(Tensor weight) -> Tensor");
  m.impl("causal_conv1d_weight_pack", torch::kCPU, &causal_conv1d_weight_pack);
  m.def(
      "causal_conv1d_fwd_cpu(Tensor x, Tensor weight, Tensor? bias, Tensor? conv_states, Tensor? query_start_loc,"
      "Tensor? cache_indices, Tensor? has_initial_state, bool silu_activation, int pad_slot_id, bool is_vnni) -> "
      "Tensor");
  m.impl("causal_conv1d_fwd_cpu", torch::kCPU, &causal_conv1d_fwd_cpu);
  m.def(
      "causal_conv1d_update_cpu(Tensor x, Tensor(a!) conv_states, Tensor weight, Tensor? bias, bool silu_activation,"
      "Tensor? cache_seqlens, Tensor? conv_state_indices, int pad_slot_id, bool is_vnni) -> Tensor");
  m.impl("causal_conv1d_update_cpu", torch::kCPU, &causal_conv1d_update_cpu);
  m.def(
      "fused_sigmoid_gating_delta_rule_update_cpu(Tensor A_log, Tensor dt_bias, Tensor q, Tensor k, Tensor v, Tensor "
      "a, Tensor b, Tensor(a!) initial_state_source, Tensor initial_state_indices, Tensor cu_seqlens, bool "
      "use_qk_l2norm_in_kernel, float softplus_beta=1.0, float softplus_threshold=20.0) -> Tensor");
  m.impl("fused_sigmoid_gating_delta_rule_update_cpu", torch::kCPU, &fused_sigmoid_gating_delta_rule_update_cpu);
  m.def("fused_gdn_gating_cpu(Tensor A_log, Tensor a, Tensor b, Tensor dt_bias) -> (Tensor, Tensor)");
  m.impl("fused_gdn_gating_cpu", torch::kCPU, &fused_gdn_gating_cpu);
}
