/* SPDX-License-Identifier: Apache-2.0 */
/* The named operators' strict option (strict.h). Each check names the
 * caller's argument and ends with the seed's constraint it enforces; the
 * library's own checks have passed, so shapes, ranges and views are valid. */
#include "core/strict.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/dtype.h"
#include "core/error.h"
#include "core/tensor.h"

#define SEED000 "strict: seed 000, the vllm-ascend split_qkv_rmsnorm_rope Triton kernel"
#define SEED001 "strict: seed 001, CANN QkvRmsNormRopeCache"
#define SEED003 "strict: seed 003, CANN DequantRopeQuantKvcache"

static const char *dt_name(qkvfuse_dtype dt) { return qkvfuse_dtype_name(dt); }

static int is_16bit_float(qkvfuse_dtype dt) { return dt == QKVFUSE_DTYPE_FLOAT16 || dt == QKVFUSE_DTYPE_BFLOAT16; }

static int64_t index_at(const qf_vec *v, int64_t i) { return qf_load_index(v->data, v->dtype, i); }

static int cmp_pair(const void *a, const void *b) {
  const int64_t *x = (const int64_t *)a, *y = (const int64_t *)b;
  return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Index values other than -1 repeat: fail naming the first two entries of the
 * smallest repeated value. Reads the index on the host (a CPU tensor), and
 * sorts a copy: n (value, entry) pairs, the one allocation of a named call. */
static qkvfuse_status unique_indices(const qf_vec *v, const char *name, const char *seed) {
  if (v->n < 2) return QKVFUSE_SUCCESS;
  const size_t bytes = (size_t)v->n * 2 * sizeof(int64_t);
  int64_t *pairs = (int64_t *)malloc(bytes);
  QF_CHECK(pairs != NULL, QKVFUSE_ERROR_OUT_OF_MEMORY,
           "%s: checking its values for repeats takes %zu bytes of host memory, not available (%s)", name, bytes,
           seed);
  int64_t m = 0;
  for (int64_t i = 0; i < v->n; i++) {
    const int64_t s = index_at(v, i);
    if (s != -1) pairs[2 * m] = s, pairs[2 * m + 1] = i, m++;
  }
  qsort(pairs, (size_t)m, 2 * sizeof(int64_t), cmp_pair);
  for (int64_t k = 0; k + 1 < m; k++)
    if (pairs[2 * k] == pairs[2 * k + 2]) {
      const long long value = (long long)pairs[2 * k], first = (long long)pairs[2 * k + 1],
                      second = (long long)pairs[2 * k + 3];
      free(pairs);
      return qf_fail(QKVFUSE_ERROR_INVALID_VALUE,
                     "%s: values must not repeat; got %s[%lld] = %s[%lld] = %lld (%s: index values may not repeat, "
                     "-1 excepted; the library writes the later token)",
                     name, name, first, name, second, value, seed);
    }
  free(pairs);
  return QKVFUSE_SUCCESS;
}

/* An output's dtype is want's (named want_name). */
static qkvfuse_status same_dtype(const char *name, qkvfuse_dtype got, const char *want_name, qkvfuse_dtype want,
                                 const char *seed, const char *rule) {
  QF_CHECK(got == want, QKVFUSE_ERROR_DTYPE, "%s: dtype must be %s's (%s); got %s (%s: %s)", name, want_name,
           dt_name(want), dt_name(got), seed, rule);
  return QKVFUSE_SUCCESS;
}

/* ---- seed 000 ------------------------------------------------------------------ */

qkvfuse_status qf_strict_split(const qf_problem *p, const void *ctx) {
  (void)ctx;
  QF_CHECK(p->desc->rope_style == QKVFUSE_ROPE_NEOX, QKVFUSE_ERROR_INVALID_VALUE,
           "is_neox: must be 1; got 0 (%s rotates the half-split pairs x1 = [0, R/2), x2 = [R/2, R) only)", SEED000);
  const qkvfuse_dtype in = p->in[0].dtype;
  QF_CHECK(in == QKVFUSE_DTYPE_BFLOAT16, QKVFUSE_ERROR_DTYPE,
           "input: dtype must be bfloat16; got %s (%s holds its data in bfloat16: .to(tl.bfloat16), BF16 buffers)",
           dt_name(in), SEED000);
  QF_CHECK(p->cos_sin_cache.dtype == QKVFUSE_DTYPE_BFLOAT16, QKVFUSE_ERROR_DTYPE,
           "cos_sin_cache: dtype must be bfloat16; got %s (%s loads cos/sin into a bfloat16 buffer)",
           dt_name(p->cos_sin_cache.dtype), SEED000);
  const char *out_rule = "its outputs are the input's dtype";
  QF_FORWARD(same_dtype("q_out", p->q_out.dtype, "input", in, SEED000, out_rule));
  QF_FORWARD(same_dtype("k_out", p->k_out.dtype, "input", in, SEED000, out_rule));
  QF_FORWARD(same_dtype("v_out", p->v_out.dtype, "input", in, SEED000, out_rule));
  /* the kernel addresses element c of row t at t * width + c in each tensor */
  const struct {
    const char *name, *width;
    const qf_mat *m;
  } rows[] = {{"input", "q_hidden_size + 2 * kv_hidden_size", &p->in[0]},
              {"q_out", "q_hidden_size", &p->q_out},
              {"k_out", "kv_hidden_size", &p->k_out},
              {"v_out", "kv_hidden_size", &p->v_out},
              {"cos_sin_cache", "rope_dim", &p->cos_sin_cache}};
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    const qf_mat *m = rows[i].m;
    const int64_t width = m == &p->in[0] ? p->H : m->cols;
    QF_CHECK(m->rows <= 1 || m->ld == width, QKVFUSE_ERROR_STRIDE,
             "%s: rows must be contiguous (row stride %s = %lld); got row stride %lld (%s addresses row t at t * "
             "its width)",
             rows[i].name, rows[i].width, (long long)width, (long long)m->ld, SEED000);
  }
  return QKVFUSE_SUCCESS;
}

/* ---- seed 001 ------------------------------------------------------------------ */

static const char *cache_mode_name(qkvfuse_cache_layout l) {
  return l == QKVFUSE_CACHE_PAGED_HND ? "PA_BNSD" : l == QKVFUSE_CACHE_PAGED ? "PA / PA_BSND" : "PA_NZ";
}

/* A cache of QkvRmsNormRopeCache: qkv's dtype or int8, block_size 32-byte aligned. */
static qkvfuse_status cache_001(const qf_problem *p, const char *name, const qf_cache *c) {
  const qkvfuse_dtype in = p->in[0].dtype;
  QF_CHECK(c->dtype == in || c->dtype == QKVFUSE_DTYPE_INT8, QKVFUSE_ERROR_DTYPE,
           "%s: dtype must be qkv's (%s, not quantized) or int8 (quantized); got %s (%s: %s FLOAT16, BFLOAT16 "
           "or INT8)",
           name, dt_name(in), dt_name(c->dtype), SEED001, name);
  const int64_t per32 = 32 / (int64_t)qkvfuse_dtype_size(c->dtype);
  QF_CHECK(c->block_size % per32 == 0, QKVFUSE_ERROR_SHAPE,
           "%s: block_size must be a multiple of %lld (32 bytes of %s); got %lld (%s: BlockSize 32-byte aligned "
           "for the cache's dtype)",
           name, (long long)per32, dt_name(c->dtype), (long long)c->block_size, SEED001);
  return QKVFUSE_SUCCESS;
}

/* A scale or offset of QkvRmsNormRopeCache: [Nk, D] exactly. */
static qkvfuse_status scale_001(const qf_problem *p, const char *name, const qkvfuse_tensor *t) {
  if (!t) return QKVFUSE_SUCCESS;
  char sh[128];
  QF_CHECK(t->ndim == 2 && t->shape[0] == p->Nkv && t->shape[1] == p->D, QKVFUSE_ERROR_SHAPE,
           "%s: shape must be [Nk, D] = [%lld, %lld]; got %s (%s: %s shape [Nk, Dqkv], one per channel)", name,
           (long long)p->Nkv, (long long)p->D, qf_shape_str(t, sh, sizeof sh), SEED001, name);
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_strict_cache(const qf_problem *p, const void *ctx) {
  const qf_strict_cache_call *c = (const qf_strict_cache_call *)ctx;
  const qkvfuse_dtype in = p->in[0].dtype;
  QF_CHECK(is_16bit_float(in), QKVFUSE_ERROR_DTYPE, "qkv: dtype must be float16 or bfloat16; got %s (%s: qkv FLOAT16, "
           "BFLOAT16)", dt_name(in), SEED001);
  const char *same = "of qkv's data type";
  QF_FORWARD(same_dtype("q_gamma", p->q_gamma.dtype, "qkv", in, SEED001, same));
  QF_FORWARD(same_dtype("k_gamma", p->k_gamma.dtype, "qkv", in, SEED001, same));
  QF_FORWARD(same_dtype("cos", p->cos.dtype, "qkv", in, SEED001, same));
  QF_FORWARD(same_dtype("q_out", p->q_out.dtype, "qkv", in, SEED001, same));
  if (p->k_out.data) QF_FORWARD(same_dtype("k_out_before_quant", p->k_out.dtype, "qkv", in, SEED001, same));
  if (p->v_out.data) QF_FORWARD(same_dtype("v_out_before_quant", p->v_out.dtype, "qkv", in, SEED001, same));
  const int64_t es = (int64_t)qkvfuse_dtype_size(in);
  QF_CHECK(p->D * es % 32 == 0, QKVFUSE_ERROR_INVALID_VALUE,
           "qkv_size[3] (D): D * %lld bytes must be a multiple of 32; got D = %lld (%s: D_qkv * element size "
           "divisible by 32)",
           (long long)es, (long long)p->D, SEED001);
  QF_CHECK(p->D == 128, QKVFUSE_ERROR_INVALID_VALUE, "qkv_size[3] (D): must be 128; got %lld (%s: D_qkv supports 128 "
           "only)", (long long)p->D, SEED001);
  QF_CHECK(p->desc->cache_layout == QKVFUSE_CACHE_NZ, QKVFUSE_ERROR_INVALID_VALUE,
           "cache_mode: must be \"PA_NZ\"; got %s (%s: cache_mode supports PA_NZ only)",
           cache_mode_name(p->desc->cache_layout), SEED001);
  QF_FORWARD(cache_001(p, "k_cache", &p->k_cache));
  QF_FORWARD(cache_001(p, "v_cache", &p->v_cache));
  /* ceil(S / block_size) * B: the sizes are the caller's, valid (B * S = T) */
  const int64_t bs = p->k_cache.block_size, need = c->S == 0 ? 0 : ((c->S - 1) / bs + 1) * c->B;
  QF_CHECK(p->k_cache.blocks >= need, QKVFUSE_ERROR_SHAPE,
           "k_cache: BlockNum must be >= ceil(S / BlockSize) * B = ceil(%lld / %lld) * %lld = %lld; got %lld (%s: "
           "BlockNum >= Ceil(S_qkv / BlockSize) * B_qkv)",
           (long long)c->S, (long long)bs, (long long)c->B, (long long)need, (long long)p->k_cache.blocks, SEED001);
  QF_FORWARD(scale_001(p, "k_scale", c->k_scale));
  QF_FORWARD(scale_001(p, "v_scale", c->v_scale));
  QF_FORWARD(scale_001(p, "k_offset", c->k_offset));
  QF_FORWARD(scale_001(p, "v_offset", c->v_offset));
  QF_CHECK(p->slot_mapping.dtype == QKVFUSE_DTYPE_INT64, QKVFUSE_ERROR_DTYPE,
           "index: dtype must be int64; got %s (%s: index INT64)", dt_name(p->slot_mapping.dtype), SEED001);
  /* the data check reads index on the host: CPU tensors only (no host copy inside a call) */
  if (p->desc->device_type == QKVFUSE_DEVICE_CPU) QF_FORWARD(unique_indices(&p->slot_mapping, "index", SEED001));
  return QKVFUSE_SUCCESS;
}

/* ---- seed 003 ------------------------------------------------------------------ */

/* cos or sin of DequantRopeQuantKvcache: [B, S, 1, D] for 3-dim x, [B, D] for 2-dim x. */
static qkvfuse_status cos_003(const qf_problem *p, const qf_strict_dequant_call *c, const char *name,
                              const qkvfuse_tensor *t) {
  const qkvfuse_tensor *x = c->x;
  char want[96], sh[128];
  int ok;
  if (x->ndim == 3) {
    ok = t->ndim == 4 && t->shape[0] == x->shape[0] && t->shape[1] == x->shape[1] && t->shape[2] == 1 &&
         t->shape[3] == p->D;
    snprintf(want, sizeof want, "[B, S, 1, D] = [%lld, %lld, 1, %lld]", (long long)x->shape[0],
             (long long)x->shape[1], (long long)p->D);
  } else {
    ok = t->ndim == 2 && t->shape[0] == x->shape[0] && t->shape[1] == p->D;
    snprintf(want, sizeof want, "[B, D] = [%lld, %lld]", (long long)x->shape[0], (long long)p->D);
  }
  QF_CHECK(ok, QKVFUSE_ERROR_SHAPE, "%s: shape must be %s; got %s (%s: %s [B, S, 1, D] for a 3-dim x, [B, D] for a "
           "2-dim x)", name, want, qf_shape_str(t, sh, sizeof sh), SEED003, name);
  return QKVFUSE_SUCCESS;
}

static qkvfuse_status scale_003(const qf_problem *p, const char *name, const qf_vec *v) {
  if (!v->data) return QKVFUSE_SUCCESS;
  QF_CHECK(v->n == p->Nkv * p->D, QKVFUSE_ERROR_SHAPE,
           "%s: must have Nkv*D = %lld elements ([Nkv, D] or [Nkv*D]); got %lld (%s: %s of Nkv*D elements)", name,
           (long long)(p->Nkv * p->D), (long long)v->n, SEED003, name);
  return QKVFUSE_SUCCESS;
}

qkvfuse_status qf_strict_dequant(const qf_problem *p, const void *ctx) {
  const qf_strict_dequant_call *c = (const qf_strict_dequant_call *)ctx;
  const qkvfuse_dtype in = p->in[0].dtype, cos = p->cos.dtype;
  QF_CHECK(is_16bit_float(in) || in == QKVFUSE_DTYPE_INT32, QKVFUSE_ERROR_DTYPE,
           "x: dtype must be float16, bfloat16 or int32; got %s (%s: x FLOAT16, BFLOAT16, INT32)", dt_name(in),
           SEED003);
  QF_CHECK(p->H <= 4096 && p->H % 64 == 0, QKVFUSE_ERROR_SHAPE,
           "x: its last dim H = (Nq + 2 * Nkv) * D must be <= 4096 and a multiple of 64; got %lld (%s: x's last dim "
           "<= 4096 and 64-aligned)",
           (long long)p->H, SEED003);
  QF_CHECK(p->D % 16 == 0, QKVFUSE_ERROR_SHAPE,
           "k_cache: shape[3] (D) must be a multiple of 16; got %lld (%s: its tiling needs hiddenSize a multiple of "
           "16)",
           (long long)p->D, SEED003);
  QF_CHECK(is_16bit_float(cos), QKVFUSE_ERROR_DTYPE, "cos: dtype must be float16 or bfloat16; got %s (%s: cos "
           "FLOAT16, BFLOAT16)", dt_name(cos), SEED003);
  if (in != QKVFUSE_DTYPE_INT32)
    QF_FORWARD(same_dtype("cos", cos, "x", in, SEED003, "x, cos and sin of one dtype for float x"));
  QF_FORWARD(cos_003(p, c, "cos", c->cos));
  QF_FORWARD(cos_003(p, c, "sin", c->sin));
  const char *same = "qOut, kOut and vOut of cos's dtype";
  QF_FORWARD(same_dtype("q_out", p->q_out.dtype, "cos", cos, SEED003, same));
  if (p->k_out.data) QF_FORWARD(same_dtype("k_out", p->k_out.dtype, "cos", cos, SEED003, same));
  if (p->v_out.data) QF_FORWARD(same_dtype("v_out", p->v_out.dtype, "cos", cos, SEED003, same));
  QF_CHECK(p->k_cache.dtype == QKVFUSE_DTYPE_INT8, QKVFUSE_ERROR_DTYPE,
           "k_cache: dtype must be int8; got %s (%s: kCacheRef INT8)", dt_name(p->k_cache.dtype), SEED003);
  QF_CHECK(p->v_cache.dtype == QKVFUSE_DTYPE_INT8, QKVFUSE_ERROR_DTYPE,
           "v_cache: dtype must be int8; got %s (%s: vCacheRef INT8)", dt_name(p->v_cache.dtype), SEED003);
  QF_FORWARD(scale_003(p, "scale_k", &p->k_scale));
  QF_FORWARD(scale_003(p, "scale_v", &p->v_scale));
  QF_FORWARD(scale_003(p, "offset_k", &p->k_offset));
  QF_FORWARD(scale_003(p, "offset_v", &p->v_offset));
  const qf_vec *ix = &p->slot_mapping;
  QF_CHECK(ix->dtype == QKVFUSE_DTYPE_INT32, QKVFUSE_ERROR_DTYPE,
           "indices: dtype must be int32; got %s (%s: indices INT32)", dt_name(ix->dtype), SEED003);
  /* the data checks read indices on the host: CPU tensors only (no host copy inside a call) */
  if (p->desc->device_type != QKVFUSE_DEVICE_CPU) return QKVFUSE_SUCCESS;
  for (int64_t i = 0; i < ix->n; i++)
    QF_CHECK(index_at(ix, i) >= 0, QKVFUSE_ERROR_OUT_OF_RANGE,
             "indices: indices[%lld] = %lld must be >= 0 (-1, skipping a token, is the library's) (%s: indices >= 0)",
             (long long)i, (long long)index_at(ix, i), SEED003);
  if (p->desc->cache_layout == QKVFUSE_CACHE_PAGED) QF_FORWARD(unique_indices(ix, "indices", SEED003));
  return QKVFUSE_SUCCESS;
}
