// SPDX-License-Identifier: Apache-2.0
// The compiled PyTorch binding of qkvfuse: the kernels of the torch.ops.qkvfuse
// operators, shared by the CPU registration (qkvfuse_torch.cpp) and the CUDA one
// (qkvfuse_torch_cuda.cpp, built when torch has CUDA). Every kernel calls the
// public C API of include/qkvfuse.h and nothing else of the library.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/string_view.h>

#include <optional>
#include <tuple>

namespace qkvfuse_ext {

using at::Tensor;
using OptTensor = std::optional<at::Tensor>;
using Str = c10::string_view;

// The current CUDA stream of a device, as a cudaStream_t; set by the CUDA part
// at load time (null when the extension has no CUDA part).
using CudaStreamFn = void *(*)(c10::DeviceIndex);
extern CudaStreamFn cuda_stream_fn;

std::tuple<Tensor, Tensor, Tensor> run(
    const OptTensor &qkv, const OptTensor &weight_scale, const OptTensor &act_scale, const OptTensor &bias,
    const OptTensor &q_gamma, const OptTensor &k_gamma, const OptTensor &q_beta, const OptTensor &k_beta,
    const OptTensor &positions, const OptTensor &cos_sin_cache, const OptTensor &cos, const OptTensor &sin,
    const OptTensor &slot_mapping, const OptTensor &k_scale, const OptTensor &v_scale, const OptTensor &k_offset,
    const OptTensor &v_offset, const OptTensor &k_cache, const OptTensor &v_cache, const OptTensor &error_flags,
    int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim, int64_t rotary_dim, Str rope, Str rope_style,
    double rope_theta, Str rope_scaling_type, c10::ArrayRef<double> rope_scaling_params, double eps,
    bool gamma_offset, Str cache_layout, Str k_quant, Str v_quant, Str rounding, Str backend, int64_t num_threads,
    std::optional<at::ScalarType> out_dtype, bool return_k, bool return_v, const OptTensor &q, const OptTensor &k,
    const OptTensor &v, const OptTensor &q_scale, Str q_quant, const OptTensor &kv_indptr,
    const OptTensor &kv_indices, const OptTensor &batch_indices, const OptTensor &kv_positions);

void run_out(const OptTensor &qkv, const OptTensor &weight_scale, const OptTensor &act_scale, const OptTensor &bias,
             const OptTensor &q_gamma, const OptTensor &k_gamma, const OptTensor &q_beta, const OptTensor &k_beta,
             const OptTensor &positions, const OptTensor &cos_sin_cache, const OptTensor &cos, const OptTensor &sin,
             const OptTensor &slot_mapping, const OptTensor &k_scale, const OptTensor &v_scale,
             const OptTensor &k_offset, const OptTensor &v_offset, const Tensor &q_out, const OptTensor &k_out,
             const OptTensor &v_out, const OptTensor &k_cache, const OptTensor &v_cache,
             const OptTensor &error_flags, int64_t num_q_heads, int64_t num_kv_heads, int64_t head_dim,
             int64_t rotary_dim, Str rope, Str rope_style, double rope_theta, Str rope_scaling_type,
             c10::ArrayRef<double> rope_scaling_params, double eps, bool gamma_offset, Str cache_layout, Str k_quant,
             Str v_quant, Str rounding, Str backend, int64_t num_threads, const OptTensor &q, const OptTensor &k,
             const OptTensor &v, const OptTensor &q_scale, Str q_quant, const OptTensor &kv_indptr,
             const OptTensor &kv_indices, const OptTensor &batch_indices, const OptTensor &kv_positions);

std::tuple<Tensor, Tensor, Tensor> split_qkv_rmsnorm_rope(
    const Tensor &input, const Tensor &q_weight, const Tensor &k_weight, const Tensor &cos_sin_cache,
    const Tensor &positions, int64_t q_hidden_size, int64_t kv_hidden_size, int64_t head_dim, double eps,
    int64_t rope_dim, const OptTensor &q_bias, const OptTensor &k_bias, bool is_neox,
    std::optional<at::ScalarType> out_dtype, const OptTensor &error_flags, Str rounding, bool strict);

void split_qkv_rmsnorm_rope_out(const Tensor &input, const Tensor &q_weight, const Tensor &k_weight,
                                const Tensor &cos_sin_cache, const Tensor &positions, int64_t q_hidden_size,
                                int64_t kv_hidden_size, int64_t head_dim, double eps, int64_t rope_dim,
                                const OptTensor &q_bias, const OptTensor &k_bias, bool is_neox, const Tensor &q_out,
                                const Tensor &k_out, const Tensor &v_out, const OptTensor &error_flags,
                                Str rounding, bool strict);

std::tuple<Tensor, Tensor, Tensor, Tensor> qkv_rmsnorm_rope_cache(
    const Tensor &qkv, const Tensor &q_gamma, const Tensor &k_gamma, const Tensor &cos, const Tensor &sin,
    const Tensor &index, const Tensor &k_cache, const Tensor &v_cache, const OptTensor &k_scale,
    const OptTensor &v_scale, const OptTensor &k_offset, const OptTensor &v_offset, c10::IntArrayRef head_nums,
    c10::IntArrayRef qkv_size, double epsilon, Str cache_mode, bool is_output_qkv, const OptTensor &error_flags,
    Str rounding, bool strict);

void qkv_rmsnorm_rope_cache_out(const Tensor &qkv, const Tensor &q_gamma, const Tensor &k_gamma, const Tensor &cos,
                                const Tensor &sin, const Tensor &index, const Tensor &q_out, const Tensor &k_cache,
                                const Tensor &v_cache, const OptTensor &k_scale, const OptTensor &v_scale,
                                const OptTensor &k_offset, const OptTensor &v_offset,
                                const OptTensor &q_out_before_quant, const OptTensor &k_out_before_quant,
                                const OptTensor &v_out_before_quant, c10::IntArrayRef head_nums,
                                c10::IntArrayRef qkv_size, double epsilon, Str cache_mode, bool is_output_qkv,
                                const OptTensor &error_flags, Str rounding, bool strict);

std::tuple<Tensor, Tensor, Tensor> dequant_rope_quant_kvcache(
    const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &k_cache, const Tensor &v_cache,
    const Tensor &indices, const Tensor &scale_k, const Tensor &scale_v, const OptTensor &offset_k,
    const OptTensor &offset_v, const OptTensor &weight_scale, const OptTensor &activation_scale, const OptTensor &bias,
    c10::IntArrayRef size_splits, Str quant_mode, Str layout, bool kv_output, Str cache_mode,
    std::optional<at::ScalarType> out_dtype, const OptTensor &error_flags, Str rounding, bool strict);

void dequant_rope_quant_kvcache_out(const Tensor &x, const Tensor &cos, const Tensor &sin, const Tensor &k_cache,
                                    const Tensor &v_cache, const Tensor &indices, const Tensor &scale_k,
                                    const Tensor &scale_v, const OptTensor &offset_k, const OptTensor &offset_v,
                                    const OptTensor &weight_scale, const OptTensor &activation_scale,
                                    const OptTensor &bias, c10::IntArrayRef size_splits, Str quant_mode, Str layout,
                                    bool kv_output, Str cache_mode, const Tensor &q_out, const OptTensor &k_out,
                                    const OptTensor &v_out, const OptTensor &error_flags, Str rounding,
                                    bool strict);

}  // namespace qkvfuse_ext

// The device kernels of every operator but the table builder: one list for
// each dispatch key that runs them (CPU, CUDA, and the catch-all).
#define QKVFUSE_TORCH_KERNELS(m)                                                                              \
  do {                                                                                                        \
    (m).impl("run", TORCH_FN(qkvfuse_ext::run));                                                              \
    (m).impl("run_out", TORCH_FN(qkvfuse_ext::run_out));                                                      \
    (m).impl("split_qkv_rmsnorm_rope", TORCH_FN(qkvfuse_ext::split_qkv_rmsnorm_rope));                        \
    (m).impl("split_qkv_rmsnorm_rope_out", TORCH_FN(qkvfuse_ext::split_qkv_rmsnorm_rope_out));                \
    (m).impl("qkv_rmsnorm_rope_cache", TORCH_FN(qkvfuse_ext::qkv_rmsnorm_rope_cache));                        \
    (m).impl("qkv_rmsnorm_rope_cache_out", TORCH_FN(qkvfuse_ext::qkv_rmsnorm_rope_cache_out));                \
    (m).impl("dequant_rope_quant_kvcache", TORCH_FN(qkvfuse_ext::dequant_rope_quant_kvcache));                \
    (m).impl("dequant_rope_quant_kvcache_out", TORCH_FN(qkvfuse_ext::dequant_rope_quant_kvcache_out));        \
  } while (0)
