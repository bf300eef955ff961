/* SPDX-License-Identifier: Apache-2.0 */
/* Every bad-input class of SPEC "Errors" and the header: start from a valid
 * base case (bases.h, first checked against the oracle), break one thing,
 * and require
 *   - the exact status code,
 *   - qkvfuse_last_error() non-empty and naming the argument,
 *   - every output, cache and input byte unchanged (byte-identical to the
 *     poison / the input), and error_flags set only for data errors.
 * On CUDA (device memory) the argument errors only: data errors are flags
 * there (test_cuda_data).
 *   test_errors [--backend reference,auto,cuda] [--verbose] */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bases.h"
#include "fp.h"
#include "harness.h"
#include "tview.h"

#define EXTRA_BYTES (1 << 20)
#define MAX_EXTRA 8

typedef struct mctx {
  tk_case *c;
  qkvfuse_desc desc;
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args args;
  uint8_t *extra, *extra_init; /* a spare input buffer for tensors that the base does not have */
  qkvfuse_tensor xt[MAX_EXTRA];
  int nxt;
  int null_args, null_plan, null_desc, null_plan_out, reupload;
} mctx;

typedef struct expect {
  qkvfuse_status want;
  const char *names; /* '|'-separated: the message must contain one */
  const char *what;
  uint32_t flag;     /* data errors: the error_flags bit */
  const char *mention; /* NULL, or text the message must also contain (the accepted shapes) */
  int cuda_only;     /* an error on CUDA only (the CPU backends take it: test_strides) */
} expect;

static qkvfuse_tensor *T_(mctx *m, int slot) { return &m->tens[slot]; }
#define TS(slot) T_(m, slot)
#define SP m->c->sp
#define H ((SP.Nq + 2 * SP.Nkv) * SP.D)

/* Change element `flat` of input slot's data (in the initial bytes; re-uploaded). */
static void poke(mctx *m, int slot, int64_t flat, double v) {
  tk_case_poke(m->c, slot, flat, v);
  m->reupload = 1;
}

/* A contiguous tensor in the extra buffer at byte offset off, filled with v
 * (elements) if v is finite, else left as the buffer's random non-zero bytes. */
static qkvfuse_tensor *extra(mctx *m, qkvfuse_dtype dt, int ndim, const int64_t *shape, size_t off, double v) {
  qkvfuse_tensor *t = &m->xt[m->nxt++];
  qkvfuse_tensor_init(t, m->extra + off, dt, ndim, shape);
  int64_t n = tk_numel(t);
  if (isfinite(v))
    for (int64_t i = 0; i < n; i++) {
      tk_encode(dt, m->extra + off + (size_t)i * tk_size(dt), v);
      tk_encode(dt, m->extra_init + off + (size_t)i * tk_size(dt), v);
    }
  return t;
}
static qkvfuse_tensor *extra1(mctx *m, qkvfuse_dtype dt, int64_t n, size_t off, double v) {
  return extra(m, dt, 1, &n, off, v);
}

#define ALL (TK_BASE_A | TK_BASE_B | TK_BASE_C | TK_BASE_D | TK_BASE_P)
#define I32 QKVFUSE_DTYPE_INT32
#define I64 QKVFUSE_DTYPE_INT64
#define MUT(bases, st, nm, text)                  \
  if (id == k++) {                                \
    if (!(base & (bases))) return 0;              \
    *e = (expect){QKVFUSE_ERROR_##st, nm, text, 0, NULL, 0};
#define END \
  return 1; \
  }

/* Give the base's input as q, k and v views of its qkv rows (args.q/k/v). */
static void split_input(mctx *m) {
  const qkvfuse_tensor *x = TS(TK_QKV);
  const int64_t w[3] = {SP.Nq * SP.D, SP.Nkv * SP.D, SP.Nkv * SP.D};
  const int slots[3] = {TK_Q, TK_K, TK_V};
  int64_t col = 0;
  for (int i = 0; i < 3; i++) {
    qkvfuse_tensor *t = TS(slots[i]);
    *t = *x;
    t->data = (char *)x->data + col * (int64_t)tk_size(x->dtype);
    t->shape[t->ndim - 1] = w[i];
    col += w[i];
    *tk_args_field(&m->args, slots[i]) = t;
  }
  m->args.qkv = NULL;
}

/* Base P's page table, replaced by one known here (T = 6, block_size 4, 3
 * sequences, 8 kv_indices entries, 9 blocks): sequence 0 has blocks {4, 1},
 * sequence 1 {0}, sequence 2 {8, 2}; tokens (sequence, position): (0, 4) ->
 * block 1 row 0, (0, 5) -> block 1 row 1, (1, 0) -> block 0 row 0, (2, 6) ->
 * block 2 row 2, skipped, (2, 7) -> block 2 row 3. Entries 5..7 of
 * kv_indices are read by no token. */
static void known_table(mctx *m) {
  static const double indptr[] = {0, 2, 3, 5}, indices[] = {4, 1, 0, 8, 2, 7, 3, 5};
  static const double batch[] = {0, 0, 1, 2, -1, 2}, pos[] = {4, 5, 0, 6, 50, 7};
  for (int i = 0; i < 4; i++) poke(m, TK_KV_INDPTR, i, indptr[i]);
  for (int i = 0; i < 8; i++) poke(m, TK_KV_INDICES, i, indices[i]);
  for (int i = 0; i < 6; i++) poke(m, TK_BATCH_INDICES, i, batch[i]), poke(m, TK_KV_POSITIONS, i, pos[i]);
}

/* Apply mutation `id` to m for base `base`: 1 applied, 0 not for this base, -1 past the end. */
static int mutate(int id, int base, mctx *m, expect *e) {
  int k = 0;
  qkvfuse_desc *d = &m->desc;
  qkvfuse_args *a = &m->args;
  /* ---- handles and versions ---- */
  MUT(ALL, NULL_POINTER, "args", "args NULL") m->null_args = 1; END
  MUT(ALL, NULL_POINTER, "plan", "plan NULL") m->null_plan = 1; END
  MUT(ALL, NULL_POINTER, "desc", "desc NULL") m->null_desc = 1; END
  MUT(ALL, NULL_POINTER, "plan", "plan out-pointer NULL") m->null_plan_out = 1; END
  MUT(ALL, VERSION, "desc", "desc.struct_size 0") d->struct_size = 0; END
  MUT(ALL, VERSION, "desc", "desc.struct_size too small") d->struct_size = sizeof *d - 8; END
  MUT(ALL, VERSION, "desc", "desc.version 2") d->version = QKVFUSE_DESC_VERSION + 1; END
  MUT(ALL, VERSION, "desc", "desc.version 0") d->version = 0; END
  MUT(ALL, VERSION, "args", "args.struct_size 8") a->struct_size = 8; END
  MUT(ALL, VERSION, "args", "args.version 99") a->version = 99; END
  /* ---- required tensors missing ---- */
  MUT(ALL, NULL_POINTER, "qkv", "qkv NULL") a->qkv = NULL; END
  MUT(ALL, NULL_POINTER, "q_out", "q_out NULL") a->q_out = NULL; END
  MUT(TK_BASE_B, NULL_POINTER, "weight_scale", "weight_scale NULL with int32 input") a->weight_scale = NULL; END
  MUT(TK_BASE_A | TK_BASE_C, NULL_POINTER, "q_gamma", "q_gamma NULL with q_norm") a->q_gamma = NULL; END
  MUT(TK_BASE_A | TK_BASE_C, NULL_POINTER, "k_gamma", "k_gamma NULL with k_norm") a->k_gamma = NULL; END
  MUT(TK_BASE_A | TK_BASE_C, NULL_POINTER, "positions", "positions NULL") a->positions = NULL; END
  MUT(TK_BASE_A, NULL_POINTER, "cos_sin_cache", "cos_sin_cache NULL") a->cos_sin_cache = NULL; END
  MUT(TK_BASE_B, NULL_POINTER, "cos", "cos NULL") a->cos = NULL; END
  MUT(TK_BASE_B, NULL_POINTER, "sin", "sin NULL") a->sin = NULL; END
  MUT(TK_BASE_A | TK_BASE_B | TK_BASE_C, NULL_POINTER, "slot_mapping", "slot_mapping NULL") a->slot_mapping = NULL; END
  MUT(TK_BASE_A | TK_BASE_B | TK_BASE_C, NULL_POINTER, "k_cache", "k_cache NULL") a->k_cache = NULL; END
  MUT(TK_BASE_A | TK_BASE_B | TK_BASE_C, NULL_POINTER, "v_cache", "v_cache NULL") a->v_cache = NULL; END
  MUT(TK_BASE_A | TK_BASE_C, NULL_POINTER, "k_scale", "k_scale NULL with quantized k") a->k_scale = NULL; END
  MUT(TK_BASE_A | TK_BASE_B, NULL_POINTER, "v_scale", "v_scale NULL with quantized v") a->v_scale = NULL; END
  MUT(TK_BASE_A, NULL_POINTER, "k_offset", "k_offset NULL with int8 asym") a->k_offset = NULL; END
  /* ---- NULL data with elements ---- */
  MUT(ALL, NULL_POINTER, "qkv", "qkv.data NULL") TS(TK_QKV)->data = NULL; END
  MUT(ALL, NULL_POINTER, "q_out", "q_out.data NULL") TS(TK_Q_OUT)->data = NULL; END
  MUT(TK_BASE_A, NULL_POINTER, "k_cache", "k_cache.data NULL") TS(TK_K_CACHE)->data = NULL; END
  MUT(TK_BASE_A, NULL_POINTER, "q_gamma", "q_gamma.data NULL") TS(TK_Q_GAMMA)->data = NULL; END
  MUT(TK_BASE_A, NULL_POINTER, "v_scale", "v_scale.data NULL") TS(TK_V_SCALE)->data = NULL; END
  /* ---- dtypes ---- */
  MUT(ALL, DTYPE, "qkv", "qkv int8") TS(TK_QKV)->dtype = QKVFUSE_DTYPE_INT8; END
  MUT(TK_BASE_A, DTYPE, "qkv", "qkv float8") TS(TK_QKV)->dtype = QKVFUSE_DTYPE_FLOAT8_E4M3FN; END
  MUT(TK_BASE_B, DTYPE, "qkv", "qkv int64") TS(TK_QKV)->dtype = QKVFUSE_DTYPE_INT64; END
  MUT(TK_BASE_A, DTYPE, "qkv", "qkv dtype 0") TS(TK_QKV)->dtype = QKVFUSE_DTYPE_NONE; END
  MUT(TK_BASE_B, DTYPE, "weight_scale", "weight_scale float16") TS(TK_WEIGHT_SCALE)->dtype = QKVFUSE_DTYPE_FLOAT16; END
  MUT(TK_BASE_B, DTYPE, "act_scale", "act_scale bfloat16") TS(TK_ACT_SCALE)->dtype = QKVFUSE_DTYPE_BFLOAT16; END
  MUT(TK_BASE_B, DTYPE, "bias", "bias int8") TS(TK_BIAS)->dtype = QKVFUSE_DTYPE_INT8; END
  MUT(TK_BASE_A, DTYPE, "q_gamma", "q_gamma int32") TS(TK_Q_GAMMA)->dtype = QKVFUSE_DTYPE_INT32; END
  MUT(TK_BASE_A, DTYPE, "k_beta", "k_beta int8") TS(TK_K_BETA)->dtype = QKVFUSE_DTYPE_INT8; END
  MUT(TK_BASE_A | TK_BASE_C, DTYPE, "positions", "positions float32") TS(TK_POSITIONS)->dtype = QKVFUSE_DTYPE_FLOAT32; END
  MUT(TK_BASE_A, DTYPE, "cos_sin_cache", "cos_sin_cache int32") TS(TK_COS_SIN_CACHE)->dtype = QKVFUSE_DTYPE_INT32; END
  MUT(TK_BASE_B, DTYPE, "cos", "cos int8") TS(TK_COS)->dtype = QKVFUSE_DTYPE_INT8; END
  MUT(TK_BASE_B, DTYPE, "sin", "sin dtype differs from cos") TS(TK_SIN)->dtype = QKVFUSE_DTYPE_BFLOAT16; END
  MUT(TK_BASE_A | TK_BASE_B, DTYPE, "slot_mapping", "slot_mapping float32") TS(TK_SLOT_MAPPING)->dtype = QKVFUSE_DTYPE_FLOAT32; END
  MUT(TK_BASE_A, DTYPE, "k_scale", "k_scale float16") TS(TK_K_SCALE)->dtype = QKVFUSE_DTYPE_FLOAT16; END
  MUT(TK_BASE_A, DTYPE, "k_offset", "k_offset int32") TS(TK_K_OFFSET)->dtype = QKVFUSE_DTYPE_INT32; END
  MUT(ALL, DTYPE, "q_out", "q_out int8") TS(TK_Q_OUT)->dtype = QKVFUSE_DTYPE_INT8; END
  MUT(TK_BASE_A, DTYPE, "q_out", "q_out float8") TS(TK_Q_OUT)->dtype = QKVFUSE_DTYPE_FLOAT8_E4M3FN; END
  MUT(TK_BASE_A, DTYPE, "q_out", "q_out bfloat16 for float16 input (SPEC: the input's dtype or float32)") TS(TK_Q_OUT)->dtype = QKVFUSE_DTYPE_BFLOAT16; END
  MUT(TK_BASE_A, DTYPE, "v_out", "v_out bfloat16 for float16 input") TS(TK_V_OUT)->dtype = QKVFUSE_DTYPE_BFLOAT16; END
  MUT(TK_BASE_B, DTYPE, "q_out", "q_out bfloat16 for int32 input with float16 cos/sin") TS(TK_Q_OUT)->dtype = QKVFUSE_DTYPE_BFLOAT16; END
  MUT(TK_BASE_A, DTYPE, "k_out", "k_out int32") TS(TK_K_OUT)->dtype = QKVFUSE_DTYPE_INT32; END
  MUT(TK_BASE_A, DTYPE, "v_out", "v_out float8") TS(TK_V_OUT)->dtype = QKVFUSE_DTYPE_FLOAT8_E4M3FN; END
  MUT(TK_BASE_B, DTYPE, "k_cache", "k_cache int32") TS(TK_K_CACHE)->dtype = QKVFUSE_DTYPE_INT32; END
  MUT(TK_BASE_B, DTYPE, "v_cache", "v_cache float16 with int8 quant") TS(TK_V_CACHE)->dtype = QKVFUSE_DTYPE_FLOAT16; END
  MUT(TK_BASE_C, DTYPE, "k_cache", "k_cache int8 with fp8 quant") TS(TK_K_CACHE)->dtype = QKVFUSE_DTYPE_INT8; END
  MUT(TK_BASE_A, DTYPE, "v_cache", "v_quant int8 with an fp8 cache") d->v_quant = QKVFUSE_QUANT_INT8_SYM; END
  MUT(TK_BASE_A, DTYPE, "k_cache", "k_quant none with an int8 cache") d->k_quant = QKVFUSE_QUANT_NONE; a->k_scale = a->k_offset = NULL; END
  /* ---- shapes ---- */
  MUT(ALL, SHAPE, "qkv", "qkv row width H - D") TS(TK_QKV)->shape[TS(TK_QKV)->ndim - 1] = H - SP.D; END
  MUT(TK_BASE_D, SHAPE, "qkv", "qkv 1-d [T*H]") { qkvfuse_tensor *t = TS(TK_QKV); t->ndim = 1; t->shape[0] = SP.T * H; t->strides[0] = 1; } END
  MUT(TK_BASE_B, SHAPE, "weight_scale", "weight_scale [H-1]") TS(TK_WEIGHT_SCALE)->shape[0] = H - 1; END
  MUT(TK_BASE_B, SHAPE, "act_scale", "act_scale [T-1]") TS(TK_ACT_SCALE)->shape[0] = SP.T - 1; END
  MUT(TK_BASE_B, SHAPE, "bias", "bias [H-2]") TS(TK_BIAS)->shape[0] = H - 2; END
  MUT(TK_BASE_A | TK_BASE_C, SHAPE, "q_gamma", "q_gamma [D-2]") TS(TK_Q_GAMMA)->shape[0] = SP.D - 2; END
  MUT(TK_BASE_A, SHAPE, "k_beta", "k_beta [D/2]") TS(TK_K_BETA)->shape[0] = SP.D / 2; END
  MUT(TK_BASE_A | TK_BASE_C, SHAPE, "positions", "positions [T-1]") TS(TK_POSITIONS)->shape[0] = SP.T - 1; END
  MUT(TK_BASE_A, SHAPE, "cos_sin_cache", "cos_sin_cache [max_pos, R-2]") TS(TK_COS_SIN_CACHE)->shape[1] = SP.R - 2; END
  MUT(TK_BASE_A, SHAPE, "cos_sin_cache", "cos_sin_cache 1-d") { qkvfuse_tensor *t = TS(TK_COS_SIN_CACHE); t->ndim = 1; t->shape[0] = SP.max_pos * SP.R; t->strides[0] = 1; } END
  MUT(TK_BASE_B, SHAPE, "cos", "cos [.., R-2]") TS(TK_COS)->shape[TS(TK_COS)->ndim - 1] = SP.R - 2; END
  MUT(TK_BASE_B, SHAPE, "sin", "sin with one token less") TS(TK_SIN)->shape[0] = 1; END
  MUT(TK_BASE_A, SHAPE, "slot_mapping", "slot_mapping [T-1]") TS(TK_SLOT_MAPPING)->shape[0] = SP.T - 1; END
  MUT(TK_BASE_B, SHAPE, "slot_mapping", "contiguous slot_mapping [T] instead of [B]") TS(TK_SLOT_MAPPING)->shape[0] = 1; END
  MUT(TK_BASE_A, SHAPE, "k_scale", "k_scale [Nkv, D-1]") TS(TK_K_SCALE)->shape[1] = SP.D - 1; END
  MUT(TK_BASE_A, SHAPE, "k_scale", "k_scale [3]") { qkvfuse_tensor *t = TS(TK_K_SCALE); t->ndim = 1; t->shape[0] = 3; t->strides[0] = 1; } END
  MUT(TK_BASE_A, SHAPE, "k_offset", "k_offset [1] with k_scale [Nkv, D]") { qkvfuse_tensor *t = TS(TK_K_OFFSET); t->ndim = 1; t->shape[0] = 1; t->strides[0] = 1; } END
  MUT(TK_BASE_A, SHAPE, "v_scale", "v_scale [3]") TS(TK_V_SCALE)->shape[0] = 3; END
  MUT(ALL, SHAPE, "q_out", "q_out with one token less") TS(TK_Q_OUT)->shape[0] -= 1; END
  MUT(TK_BASE_A, SHAPE, "q_out", "q_out [T, Nq*D - 2]") TS(TK_Q_OUT)->shape[TS(TK_Q_OUT)->ndim - 1] -= 2; END
  MUT(TK_BASE_A, SHAPE, "k_out", "k_out [T, Nkv*D - D]") TS(TK_K_OUT)->shape[TS(TK_K_OUT)->ndim - 1] -= SP.D; END
  MUT(TK_BASE_A | TK_BASE_B, SHAPE, "v_out", "v_out with one token less") TS(TK_V_OUT)->shape[0] -= 1; END
  MUT(TK_BASE_A, SHAPE, "k_cache", "paged k_cache shape[2] != Nkv") TS(TK_K_CACHE)->shape[2] = 1; END
  MUT(TK_BASE_A, SHAPE, "k_cache", "paged k_cache shape[3] != D") TS(TK_K_CACHE)->shape[3] = SP.D / 2; END
  MUT(TK_BASE_A, SHAPE, "k_cache", "k_cache 3-d") TS(TK_K_CACHE)->ndim = 3; END
  MUT(TK_BASE_A, SHAPE, "k_cache", "paged k_cache given to a paged_hnd plan") d->cache_layout = QKVFUSE_CACHE_PAGED_HND; END
  MUT(TK_BASE_A, SHAPE, "v_cache", "v_cache blocks differ from k_cache") TS(TK_V_CACHE)->shape[0] -= 1; END
  MUT(TK_BASE_A, SHAPE, "v_cache", "v_cache block_size differs from k_cache") TS(TK_V_CACHE)->shape[1] -= 1; END
  MUT(TK_BASE_B, SHAPE, "k_cache", "contiguous caches with batch < B") TS(TK_K_CACHE)->shape[0] = TS(TK_V_CACHE)->shape[0] = 1; END
  MUT(TK_BASE_B, SHAPE, "k_cache", "contiguous k_cache shape[3] != D") TS(TK_K_CACHE)->shape[3] = SP.D - 2; END
  MUT(TK_BASE_B, SHAPE, "v_cache", "contiguous v_cache max_seq differs from k_cache") TS(TK_V_CACHE)->shape[1] -= 1; END
  MUT(TK_BASE_C, SHAPE, "k_cache", "nz k_cache shape[3] != c") { qkvfuse_tensor *t = TS(TK_K_CACHE); t->shape[3] = 16; t->shape[1] *= 2; } END
  MUT(TK_BASE_C, SHAPE, "k_cache", "nz k_cache shape[1] != Nkv*D/c") TS(TK_K_CACHE)->shape[1] -= 1; END
  MUT(TK_BASE_C, SHAPE, "v_cache", "nz v_cache block_size differs") TS(TK_V_CACHE)->shape[2] -= 1; END
  MUT(TK_BASE_D, SHAPE, "k_cache", "nz with Nkv*D not divisible by c") {
    int64_t cs[4] = {2, 1, 4, 32}, one = 1, three = 3;
    d->cache_layout = QKVFUSE_CACHE_NZ, d->k_quant = d->v_quant = QKVFUSE_QUANT_INT8_SYM;
    a->k_cache = extra(m, QKVFUSE_DTYPE_INT8, 4, cs, 0, NAN);
    a->v_cache = extra(m, QKVFUSE_DTYPE_INT8, 4, cs, 4096, NAN);
    a->slot_mapping = extra(m, QKVFUSE_DTYPE_INT32, 1, &three, 8192, 1);
    a->k_scale = extra(m, QKVFUSE_DTYPE_FLOAT32, 1, &one, 8448, 0.5);
    a->v_scale = extra(m, QKVFUSE_DTYPE_FLOAT32, 1, &one, 8704, 0.5);
  } END
  MUT(ALL, SHAPE, "qkv", "qkv negative shape") TS(TK_QKV)->shape[0] = -1; END
  MUT(ALL, SHAPE, "qkv", "qkv ndim 7") TS(TK_QKV)->ndim = QKVFUSE_MAX_DIMS + 1; END
  /* ---- strides ---- */
  MUT(ALL, STRIDE, "qkv", "qkv innermost stride 2") TS(TK_QKV)->strides[TS(TK_QKV)->ndim - 1] = 2; END
  MUT(ALL, STRIDE, "qkv", "qkv row stride < H") TS(TK_QKV)->strides[TS(TK_QKV)->ndim - 2] = H - 2; END
  MUT(ALL, STRIDE, "qkv", "qkv negative stride") TS(TK_QKV)->strides[0] = -1; END
  MUT(TK_BASE_B, STRIDE, "qkv", "qkv [B, S, H] not collapsible") TS(TK_QKV)->strides[0] -= 1; END
  MUT(ALL, STRIDE, "q_out", "q_out innermost stride 2") TS(TK_Q_OUT)->strides[TS(TK_Q_OUT)->ndim - 1] = 2; END
  MUT(TK_BASE_A, STRIDE, "q_out", "q_out [T, Nq, D] with head stride D+1") {
    qkvfuse_tensor *t = TS(TK_Q_OUT);
    t->ndim = 3, t->shape[1] = SP.Nq, t->shape[2] = SP.D, t->strides[1] = SP.D + 1, t->strides[2] = 1;
  } END
  MUT(TK_BASE_A, STRIDE, "q_out", "q_out rows overlap (row stride < Nq*D)") TS(TK_Q_OUT)->strides[0] = SP.Nq * SP.D - 1; END
  MUT(TK_BASE_A, STRIDE, "q_gamma", "q_gamma stride 2") { TS(TK_Q_GAMMA)->strides[0] = 2; e->cuda_only = 1; } END
  MUT(TK_BASE_A, STRIDE, "k_cache", "k_cache innermost stride 2") TS(TK_K_CACHE)->strides[3] = 2; END
  MUT(TK_BASE_A, STRIDE, "k_cache", "k_cache row stride 0 (rows alias)") TS(TK_K_CACHE)->strides[1] = 0; END
  MUT(TK_BASE_B, STRIDE, "cos", "cos innermost stride 2") TS(TK_COS)->strides[TS(TK_COS)->ndim - 1] = 2; END
  /* ---- alignment ---- */
  MUT(TK_BASE_A, ALIGNMENT, "qkv", "qkv misaligned by 1 byte") TS(TK_QKV)->data = (char *)TS(TK_QKV)->data + 1; END
  MUT(TK_BASE_A, ALIGNMENT, "q_out", "q_out misaligned by 1 byte") TS(TK_Q_OUT)->data = (char *)TS(TK_Q_OUT)->data + 1; END
  MUT(TK_BASE_A, ALIGNMENT, "positions", "int64 positions misaligned by 4 bytes") TS(TK_POSITIONS)->data = (char *)TS(TK_POSITIONS)->data + 4; END
  MUT(TK_BASE_A, ALIGNMENT, "k_scale", "k_scale misaligned by 2 bytes") TS(TK_K_SCALE)->data = (char *)TS(TK_K_SCALE)->data + 2; END
  MUT(TK_BASE_B, ALIGNMENT, "qkv", "int32 qkv misaligned by 2 bytes") TS(TK_QKV)->data = (char *)TS(TK_QKV)->data + 2; END
  MUT(TK_BASE_B, ALIGNMENT, "k_cache", "float32 k_cache misaligned by 2 bytes") TS(TK_K_CACHE)->data = (char *)TS(TK_K_CACHE)->data + 2; END
  /* ---- descriptor values (plan creation) ---- */
  MUT(ALL, INVALID_VALUE, "head_dim", "head_dim odd") d->head_dim += 1; END
  MUT(ALL, INVALID_VALUE, "head_dim", "head_dim 14") d->head_dim = 14; END
  MUT(ALL, INVALID_VALUE, "head_dim", "head_dim 1026") d->head_dim = 1026; END
  MUT(ALL, INVALID_VALUE, "head_dim", "head_dim 0") d->head_dim = 0; END
  MUT(TK_BASE_A | TK_BASE_B | TK_BASE_C, INVALID_VALUE, "rotary_dim", "rotary_dim odd") d->rotary_dim -= 1; END
  MUT(TK_BASE_A | TK_BASE_B | TK_BASE_C, INVALID_VALUE, "rotary_dim", "rotary_dim > head_dim") d->rotary_dim = d->head_dim + 2; END
  MUT(TK_BASE_A | TK_BASE_B | TK_BASE_C, INVALID_VALUE, "rotary_dim", "rotary_dim 0 with RoPE") d->rotary_dim = 0; END
  MUT(TK_BASE_D, INVALID_VALUE, "rotary_dim", "rotary_dim given with ROPE_NONE") d->rotary_dim = 8; END
  MUT(ALL, INVALID_VALUE, "num_q_heads", "num_q_heads 0") d->num_q_heads = 0; END
  MUT(ALL, INVALID_VALUE, "num_kv_heads", "num_kv_heads 0") d->num_kv_heads = 0; END
  MUT(ALL, INVALID_VALUE, "num_kv_heads", "num_kv_heads -1") d->num_kv_heads = -1; END
  MUT(TK_BASE_A | TK_BASE_C, INVALID_VALUE, "eps", "eps 0") d->eps = 0; END
  MUT(TK_BASE_A | TK_BASE_C, INVALID_VALUE, "eps", "eps negative") d->eps = -1e-6f; END
  MUT(TK_BASE_A | TK_BASE_C, INVALID_VALUE, "eps", "eps NaN") d->eps = NAN; END
  MUT(TK_BASE_A | TK_BASE_C, INVALID_VALUE, "eps", "eps Inf") d->eps = INFINITY; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_theta", "rope_theta 1") d->rope_theta = 1.0; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_theta", "rope_theta NaN") d->rope_theta = NAN; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_theta", "rope_theta -10000") d->rope_theta = -10000; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling.factor", "yarn factor 0") d->rope_scaling.factor = 0; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling.factor", "yarn factor NaN") d->rope_scaling.factor = NAN; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling.original_max_position", "yarn original_max_position 0") d->rope_scaling.original_max_position = 0; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling.factor", "linear factor -2") d->rope_scaling.type = QKVFUSE_ROPE_SCALING_LINEAR, d->rope_scaling.factor = -2; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling.factor", "ntk factor 0") d->rope_scaling.type = QKVFUSE_ROPE_SCALING_NTK, d->rope_scaling.factor = 0; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling.factor", "llama3 factor Inf") d->rope_scaling = (qkvfuse_rope_scaling){QKVFUSE_ROPE_SCALING_LLAMA3, INFINITY, 8192, 1, 4, 32, 1, 1, 1}; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling.original_max_position", "llama3 original_max_position -1") d->rope_scaling = (qkvfuse_rope_scaling){QKVFUSE_ROPE_SCALING_LLAMA3, 8, -1, 1, 4, 32, 1, 1, 1}; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling.high_freq_factor|rope_scaling.low_freq_factor", "llama3 high_freq_factor <= low_freq_factor") d->rope_scaling = (qkvfuse_rope_scaling){QKVFUSE_ROPE_SCALING_LLAMA3, 8, 8192, 4, 4, 32, 1, 1, 1}; END
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling", "scaling type 9") d->rope_scaling.type = (qkvfuse_rope_scaling_type)9; END
  MUT(ALL, INVALID_VALUE, "rope_source", "rope_source 9") d->rope_source = (qkvfuse_rope_source)9; END
  MUT(TK_BASE_A | TK_BASE_C, INVALID_VALUE, "rope_style", "rope_style 5") d->rope_style = (qkvfuse_rope_style)5; END
  MUT(ALL, INVALID_VALUE, "cache_layout", "cache_layout 9") d->cache_layout = (qkvfuse_cache_layout)9; END
  MUT(TK_BASE_A | TK_BASE_C, INVALID_VALUE, "k_quant", "k_quant 9") d->k_quant = (qkvfuse_quant_mode)9; END
  MUT(TK_BASE_A | TK_BASE_B, INVALID_VALUE, "v_quant", "v_quant 9") d->v_quant = (qkvfuse_quant_mode)9; END
  MUT(TK_BASE_D, INVALID_VALUE, "k_quant", "k_quant without a cache layout") d->k_quant = QKVFUSE_QUANT_INT8_SYM; END
  MUT(ALL, INVALID_VALUE, "rounding", "rounding 7") d->rounding = (qkvfuse_rounding)7; END
  MUT(ALL, INVALID_VALUE, "backend", "backend 9") d->backend = (qkvfuse_backend)9; END
  /* each enum's _COUNT (one past its last value) and -1: the first values out of range */
  MUT(TK_BASE_C, INVALID_VALUE, "rope_scaling", "scaling type COUNT") d->rope_scaling.type = QKVFUSE_ROPE_SCALING_COUNT; END
  MUT(ALL, INVALID_VALUE, "rope_source", "rope_source COUNT") d->rope_source = QKVFUSE_ROPE_SOURCE_COUNT; END
  MUT(ALL, INVALID_VALUE, "rope_source", "rope_source -1") d->rope_source = (qkvfuse_rope_source)-1; END
  MUT(TK_BASE_A | TK_BASE_C, INVALID_VALUE, "rope_style", "rope_style COUNT") d->rope_style = QKVFUSE_ROPE_STYLE_COUNT; END
  MUT(ALL, INVALID_VALUE, "cache_layout", "cache_layout COUNT") d->cache_layout = QKVFUSE_CACHE_LAYOUT_COUNT; END
  MUT(ALL, INVALID_VALUE, "cache_layout", "cache_layout -1") d->cache_layout = (qkvfuse_cache_layout)-1; END
  MUT(TK_BASE_A | TK_BASE_C, INVALID_VALUE, "k_quant", "k_quant COUNT") d->k_quant = QKVFUSE_QUANT_COUNT; END
  MUT(TK_BASE_A | TK_BASE_B, INVALID_VALUE, "v_quant", "v_quant -1") d->v_quant = (qkvfuse_quant_mode)-1; END
  MUT(TK_BASE_P, INVALID_VALUE, "cache_addressing", "cache_addressing COUNT") d->cache_addressing = QKVFUSE_ADDRESS_COUNT; END
  MUT(ALL, INVALID_VALUE, "rounding", "rounding COUNT") d->rounding = QKVFUSE_ROUNDING_COUNT; END
  MUT(ALL, INVALID_VALUE, "backend", "backend COUNT") d->backend = QKVFUSE_BACKEND_COUNT; END
  MUT(ALL, INVALID_VALUE, "backend", "backend -1") d->backend = (qkvfuse_backend)-1; END
  MUT(ALL, INVALID_VALUE, "num_threads", "num_threads -1") d->num_threads = -1; END
  /* ---- tensors the plan cannot use ---- */
  MUT(TK_BASE_A, INVALID_VALUE, "weight_scale", "weight_scale with float input") a->weight_scale = extra1(m, QKVFUSE_DTYPE_FLOAT32, H, 0, 1.0); END
  MUT(TK_BASE_A, INVALID_VALUE, "act_scale", "act_scale with float input") a->act_scale = extra1(m, QKVFUSE_DTYPE_FLOAT32, SP.T, 0, 1.0); END
  MUT(TK_BASE_A, INVALID_VALUE, "bias", "bias with float input") a->bias = extra1(m, QKVFUSE_DTYPE_FLOAT32, H, 0, 0.5); END
  MUT(TK_BASE_D, INVALID_VALUE, "q_gamma", "q_gamma without q_norm") a->q_gamma = extra1(m, QKVFUSE_DTYPE_FLOAT32, SP.D, 0, 1.0); END
  MUT(TK_BASE_D, INVALID_VALUE, "k_beta", "k_beta without k_norm") a->k_beta = extra1(m, QKVFUSE_DTYPE_FLOAT32, SP.D, 0, 1.0); END
  MUT(TK_BASE_A, INVALID_VALUE, "q_gamma|q_beta", "q_gamma and q_beta with q_norm = 0") d->q_norm = 0; END
  MUT(TK_BASE_D, INVALID_VALUE, "positions", "positions without RoPE") a->positions = extra1(m, QKVFUSE_DTYPE_INT64, SP.T, 0, 1.0); END
  MUT(TK_BASE_B, INVALID_VALUE, "positions", "positions with per-token cos/sin") a->positions = extra1(m, QKVFUSE_DTYPE_INT64, SP.T, 0, 1.0); END
  MUT(TK_BASE_B, INVALID_VALUE, "cos_sin_cache", "cos_sin_cache with per-token cos/sin") { int64_t sh[2] = {4, SP.R}; a->cos_sin_cache = extra(m, QKVFUSE_DTYPE_FLOAT16, 2, sh, 0, 0.5); } END
  MUT(TK_BASE_A, INVALID_VALUE, "cos", "cos/sin with a cos_sin_cache plan") { int64_t sh[2] = {SP.T, SP.R}; a->cos = extra(m, QKVFUSE_DTYPE_FLOAT16, 2, sh, 0, 0.5); a->sin = extra(m, QKVFUSE_DTYPE_FLOAT16, 2, sh, 8192, 0.5); } END
  MUT(TK_BASE_C, INVALID_VALUE, "cos_sin_cache", "cos_sin_cache with a computed plan") { int64_t sh[2] = {4, SP.R}; a->cos_sin_cache = extra(m, QKVFUSE_DTYPE_FLOAT32, 2, sh, 0, 0.5); } END
  MUT(TK_BASE_D, INVALID_VALUE, "slot_mapping", "slot_mapping without a cache") a->slot_mapping = extra1(m, QKVFUSE_DTYPE_INT64, SP.T, 0, 1.0); END
  MUT(TK_BASE_D, INVALID_VALUE, "k_cache", "k_cache without a cache layout") { int64_t sh[4] = {2, 4, 1, 16}; a->k_cache = extra(m, QKVFUSE_DTYPE_FLOAT32, 4, sh, 0, NAN); } END
  MUT(TK_BASE_B, INVALID_VALUE, "k_scale", "k_scale with k_quant none") a->k_scale = extra1(m, QKVFUSE_DTYPE_FLOAT32, 1, 0, 0.5); END
  MUT(TK_BASE_A, INVALID_VALUE, "k_offset", "k_offset with int8 sym") d->k_quant = QKVFUSE_QUANT_INT8_SYM; END
  MUT(TK_BASE_A, INVALID_VALUE, "v_offset", "v_offset with fp8") a->v_offset = extra1(m, QKVFUSE_DTYPE_FLOAT32, 1, 0, 0.5); END
  /* ---- devices ---- */
  MUT(ALL, DEVICE, "qkv", "a CUDA qkv with a CPU plan") TS(TK_QKV)->device_type = QKVFUSE_DEVICE_CUDA; END
  MUT(TK_BASE_A | TK_BASE_B, DEVICE, "k_cache", "a CUDA k_cache with a CPU plan") TS(TK_K_CACHE)->device_type = QKVFUSE_DEVICE_CUDA; END
  MUT(TK_BASE_B, DEVICE, "cos", "a CUDA cos with a CPU plan") TS(TK_COS)->device_type = QKVFUSE_DEVICE_CUDA; END
  MUT(TK_BASE_A, DEVICE, "q_out", "a CUDA q_out with a CPU plan") TS(TK_Q_OUT)->device_type = QKVFUSE_DEVICE_CUDA; END
  /* ---- data: positions, slots, scales ---- */
  MUT(TK_BASE_A, OUT_OF_RANGE, "positions", "position = max_pos") poke(m, TK_POSITIONS, 2, (double)SP.max_pos); e->flag = QKVFUSE_DATA_ERROR_POSITION; END
  MUT(TK_BASE_A, OUT_OF_RANGE, "positions", "position -1") poke(m, TK_POSITIONS, SP.T - 1, -1); e->flag = QKVFUSE_DATA_ERROR_POSITION; END
  MUT(TK_BASE_A, OUT_OF_RANGE, "positions", "position 2^40") poke(m, TK_POSITIONS, 0, 1099511627776.0); e->flag = QKVFUSE_DATA_ERROR_POSITION; END
  MUT(TK_BASE_C, OUT_OF_RANGE, "positions", "computed: position -5") poke(m, TK_POSITIONS, 3, -5); e->flag = QKVFUSE_DATA_ERROR_POSITION; END
  MUT(TK_BASE_C, OUT_OF_RANGE, "positions", "computed: position 2^31 (int64)") {
    a->positions = extra1(m, QKVFUSE_DTYPE_INT64, SP.T, 0, 7);
    tk_encode(QKVFUSE_DTYPE_INT64, m->extra + 8, 2147483648.0);
    tk_encode(QKVFUSE_DTYPE_INT64, m->extra_init + 8, 2147483648.0);
    e->flag = QKVFUSE_DATA_ERROR_POSITION;
  } END
  MUT(TK_BASE_A | TK_BASE_C, OUT_OF_RANGE, "slot_mapping", "slot = blocks * block_size") poke(m, TK_SLOT_MAPPING, 1, (double)(SP.blocks * SP.block_size)); e->flag = QKVFUSE_DATA_ERROR_SLOT; END
  MUT(TK_BASE_A, OUT_OF_RANGE, "slot_mapping", "slot -2") poke(m, TK_SLOT_MAPPING, SP.T - 1, -2); e->flag = QKVFUSE_DATA_ERROR_SLOT; END
  MUT(TK_BASE_A, OUT_OF_RANGE, "slot_mapping", "slot 2^30") poke(m, TK_SLOT_MAPPING, 0, 1073741824.0); e->flag = QKVFUSE_DATA_ERROR_SLOT; END
  MUT(TK_BASE_B, OUT_OF_RANGE, "slot_mapping", "contiguous start + S > max_seq") poke(m, TK_SLOT_MAPPING, 1, (double)(SP.max_seq - SP.S + 1)); e->flag = QKVFUSE_DATA_ERROR_SLOT; END
  MUT(TK_BASE_B, OUT_OF_RANGE, "slot_mapping", "contiguous start -3") poke(m, TK_SLOT_MAPPING, 0, -3); e->flag = QKVFUSE_DATA_ERROR_SLOT; END
  MUT(TK_BASE_A, BAD_SCALE, "k_scale", "a zero k_scale channel") poke(m, TK_K_SCALE, SP.D + 5, 0.0); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_A, BAD_SCALE, "k_scale", "a NaN k_scale channel") poke(m, TK_K_SCALE, 2 * SP.D - 1, NAN); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_A, BAD_SCALE, "k_scale", "an Inf k_scale channel") poke(m, TK_K_SCALE, 0, -INFINITY); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_A, BAD_SCALE, "v_scale", "a zero per-tensor v_scale") poke(m, TK_V_SCALE, 0, -0.0); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_B, BAD_SCALE, "v_scale", "a zero v_scale channel (flat)") poke(m, TK_V_SCALE, 17, 0.0); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_C, BAD_SCALE, "k_scale", "an Inf scalar k_scale") poke(m, TK_K_SCALE, 0, INFINITY); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_A, BAD_SCALE, "k_offset", "a NaN k_offset") poke(m, TK_K_OFFSET, 7, NAN); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_A, BAD_SCALE, "k_offset", "an Inf k_offset") poke(m, TK_K_OFFSET, SP.Nkv * SP.D - 1, INFINITY); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  /* every class of data error at once: the first one's status, every one's bit */
  MUT(TK_BASE_A, OUT_OF_RANGE, "positions", "position, slot and k_scale all bad") {
    poke(m, TK_POSITIONS, 1, (double)SP.max_pos);
    poke(m, TK_SLOT_MAPPING, 2, -7);
    poke(m, TK_K_SCALE, 3, 0.0);
    e->flag = QKVFUSE_DATA_ERROR_POSITION | QKVFUSE_DATA_ERROR_SLOT | QKVFUSE_DATA_ERROR_SCALE;
  } END
  MUT(TK_BASE_B, OUT_OF_RANGE, "slot_mapping", "contiguous start and act_scale both bad") {
    poke(m, TK_SLOT_MAPPING, 0, -3);
    poke(m, TK_ACT_SCALE, SP.T - 1, NAN);
    e->flag = QKVFUSE_DATA_ERROR_SLOT | QKVFUSE_DATA_ERROR_SCALE;
  } END
  /* the dequant scales multiply: finite, zero allowed (special_* runs a zero one) */
  MUT(TK_BASE_B, BAD_SCALE, "weight_scale", "a NaN weight_scale channel") poke(m, TK_WEIGHT_SCALE, H - 1, NAN); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_B, BAD_SCALE, "weight_scale", "an Inf weight_scale channel") poke(m, TK_WEIGHT_SCALE, 3, -INFINITY); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_B, BAD_SCALE, "act_scale", "an Inf act_scale") poke(m, TK_ACT_SCALE, 1, INFINITY); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  /* ---- quantized q (q_quant, q_scale), fp8 e5m2 caches, per-head scales ---- */
  MUT(TK_BASE_F, NULL_POINTER, "q_scale", "q_scale NULL with q_quant") a->q_scale = NULL; END
  MUT(TK_BASE_F, NULL_POINTER, "q_scale", "q_scale.data NULL") TS(TK_Q_SCALE)->data = NULL; END
  MUT(TK_BASE_F, NULL_POINTER, "q_scale", "args version 1 (no q_scale) with q_quant") {
    a->struct_size = (uint32_t)offsetof(qkvfuse_args, q), a->version = 1;
  } END
  MUT(TK_BASE_A, INVALID_VALUE, "q_scale", "q_scale without q_quant") a->q_scale = extra1(m, QKVFUSE_DTYPE_FLOAT32, 1, 0, 0.5); END
  MUT(TK_BASE_F, INVALID_VALUE, "q_quant", "q_quant int8_sym") d->q_quant = QKVFUSE_QUANT_INT8_SYM; END
  MUT(TK_BASE_F, INVALID_VALUE, "q_quant", "q_quant int8_asym") d->q_quant = QKVFUSE_QUANT_INT8_ASYM; END
  MUT(TK_BASE_F, INVALID_VALUE, "q_quant", "q_quant 9") d->q_quant = (qkvfuse_quant_mode)9; END
  MUT(TK_BASE_F, INVALID_VALUE, "q_quant", "q_quant -1") d->q_quant = (qkvfuse_quant_mode)-1; END
  MUT(TK_BASE_F, INVALID_VALUE, "k_quant", "k_quant 5") d->k_quant = (qkvfuse_quant_mode)5; END
  MUT(TK_BASE_F, DTYPE, "q_scale", "q_scale float16") TS(TK_Q_SCALE)->dtype = QKVFUSE_DTYPE_FLOAT16; END
  MUT(TK_BASE_F, DTYPE, "q_scale", "q_scale int32") TS(TK_Q_SCALE)->dtype = QKVFUSE_DTYPE_INT32; END
  MUT(TK_BASE_F, DTYPE, "q_out", "q_out float8_e4m3fn with q_quant fp8_e5m2") TS(TK_Q_OUT)->dtype = QKVFUSE_DTYPE_FLOAT8_E4M3FN; END
  MUT(TK_BASE_F, DTYPE, "q_out", "q_out float8_e5m2 with q_quant fp8_e4m3") d->q_quant = QKVFUSE_QUANT_FP8_E4M3; END
  MUT(TK_BASE_F, DTYPE, "q_out", "q_out bfloat16 with q_quant fp8_e5m2") TS(TK_Q_OUT)->dtype = QKVFUSE_DTYPE_BFLOAT16; END
  MUT(TK_BASE_F, DTYPE, "q_out", "q_out float8_e5m2 with q_quant none") d->q_quant = QKVFUSE_QUANT_NONE; a->q_scale = NULL; END
  MUT(TK_BASE_F, DTYPE, "q_out", "desc version 1 (no q_quant) with a float8_e5m2 q_out") {
    d->struct_size = (uint32_t)offsetof(qkvfuse_desc, q_quant), d->version = 1;
  } END
  MUT(TK_BASE_A, DTYPE, "q_out", "q_out float8_e5m2 without q_quant") TS(TK_Q_OUT)->dtype = QKVFUSE_DTYPE_FLOAT8_E5M2; END
  MUT(TK_BASE_A, DTYPE, "k_out", "k_out float8_e5m2 (k_out is never quantized)") TS(TK_K_OUT)->dtype = QKVFUSE_DTYPE_FLOAT8_E5M2; END
  MUT(TK_BASE_F, DTYPE, "k_cache", "k_cache int8 with k_quant fp8_e5m2") TS(TK_K_CACHE)->dtype = QKVFUSE_DTYPE_INT8; END
  MUT(TK_BASE_F, DTYPE, "k_cache", "k_quant fp8_e4m3 with a float8_e5m2 k_cache") d->k_quant = QKVFUSE_QUANT_FP8_E4M3; END
  MUT(TK_BASE_F, DTYPE, "k_cache", "k_quant none with a float8_e5m2 k_cache") d->k_quant = QKVFUSE_QUANT_NONE; a->k_scale = NULL; END
  MUT(TK_BASE_F, DTYPE, "v_cache", "v_cache float8_e5m2 with int8 asym quant") TS(TK_V_CACHE)->dtype = QKVFUSE_DTYPE_FLOAT8_E5M2; END
  MUT(TK_BASE_A, DTYPE, "v_cache", "v_quant fp8_e5m2 with a float8_e4m3fn v_cache") d->v_quant = QKVFUSE_QUANT_FP8_E5M2; END
  MUT(TK_BASE_F, SHAPE, "q_scale", "q_scale [2]") TS(TK_Q_SCALE)->shape[0] = 2; END
  MUT(TK_BASE_F, SHAPE, "q_scale", "q_scale [Nq, D]") {
    qkvfuse_tensor *t = TS(TK_Q_SCALE);
    t->ndim = 2, t->shape[0] = SP.Nq, t->shape[1] = SP.D, t->strides[0] = SP.D, t->strides[1] = 1;
  } END
  MUT(TK_BASE_F, SHAPE, "k_scale", "per-head k_scale [Nkv + 1]") {
    TS(TK_K_SCALE)->shape[0] = SP.Nkv + 1;
    e->mention = "Nkv = 2 (per kv head: [Nkv])";
  } END
  MUT(TK_BASE_F, SHAPE, "k_scale", "k_scale [D]") {
    TS(TK_K_SCALE)->shape[0] = SP.D;
    e->mention = "1 (per tensor: [1] or a scalar), Nkv = 2 (per kv head: [Nkv]) or Nkv*D = 128 (per channel";
  } END
  MUT(TK_BASE_F, SHAPE, "v_offset", "v_offset [1] with a per-head v_scale [Nkv]") TS(TK_V_OFFSET)->shape[0] = 1; END
  MUT(TK_BASE_F, SHAPE, "v_offset", "v_offset [Nkv*D] with a per-head v_scale [Nkv]") {
    a->v_offset = extra1(m, QKVFUSE_DTYPE_FLOAT32, SP.Nkv * SP.D, 0, 0.5);
  } END
  MUT(TK_BASE_F, ALIGNMENT, "q_scale", "q_scale misaligned by 2 bytes") TS(TK_Q_SCALE)->data = (char *)TS(TK_Q_SCALE)->data + 2; END
  MUT(TK_BASE_F, DEVICE, "q_scale", "a CUDA q_scale with a CPU plan") TS(TK_Q_SCALE)->device_type = QKVFUSE_DEVICE_CUDA; END
  MUT(TK_BASE_F, OVERLAP, "q_out", "a float8 q_out on qkv's q columns (not in place: another dtype)") {
    qkvfuse_tensor *q = TS(TK_Q_OUT), *x = TS(TK_QKV);
    q->data = x->data;
    q->strides[0] = x->strides[0];
  } END
  MUT(TK_BASE_F, OVERLAP, "q_out|q_scale", "q_scale inside q_out") TS(TK_Q_SCALE)->data = TS(TK_Q_OUT)->data; END
  MUT(TK_BASE_F, BAD_SCALE, "q_scale", "a zero q_scale") poke(m, TK_Q_SCALE, 0, 0.0); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_F, BAD_SCALE, "q_scale", "a NaN q_scale") poke(m, TK_Q_SCALE, 0, NAN); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_F, BAD_SCALE, "q_scale", "a -Inf q_scale") poke(m, TK_Q_SCALE, 0, -INFINITY); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_F, BAD_SCALE, "k_scale", "a zero per-head k_scale (head 1)") poke(m, TK_K_SCALE, 1, -0.0); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_F, BAD_SCALE, "v_scale", "a NaN per-head v_scale (head 0)") poke(m, TK_V_SCALE, 0, NAN); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_F, BAD_SCALE, "v_offset", "an Inf per-head v_offset (head 1)") poke(m, TK_V_OFFSET, 1, INFINITY); e->flag = QKVFUSE_DATA_ERROR_SCALE; END
  MUT(TK_BASE_F, OUT_OF_RANGE, "slot_mapping", "a bad slot and a zero q_scale") {
    poke(m, TK_SLOT_MAPPING, 2, -5);
    poke(m, TK_Q_SCALE, 0, 0.0);
    e->flag = QKVFUSE_DATA_ERROR_SLOT | QKVFUSE_DATA_ERROR_SCALE;
  } END
  /* ---- overlap ---- */
  MUT(TK_BASE_A, OVERLAP, "error_flags", "error_flags inside k_cache, with a bad slot") {
    a->error_flags = (uint32_t *)((char *)TS(TK_K_CACHE)->data + 64);
    poke(m, TK_SLOT_MAPPING, 0, (double)(SP.blocks * SP.block_size));
  } END
  MUT(TK_BASE_A, OVERLAP, "error_flags", "error_flags on a q_out element") a->error_flags = (uint32_t *)TS(TK_Q_OUT)->data; END
  MUT(TK_BASE_A, OVERLAP, "error_flags", "error_flags on positions, with a bad position") {
    a->error_flags = (uint32_t *)TS(TK_POSITIONS)->data;
    poke(m, TK_POSITIONS, 1, -1);
  } END
  MUT(TK_BASE_B, OVERLAP, "error_flags", "error_flags inside qkv's v columns") {
    a->error_flags = (uint32_t *)((char *)TS(TK_QKV)->data + (SP.Nq + SP.Nkv) * SP.D * 4);
  } END
  MUT(TK_BASE_C, OVERLAP, "error_flags", "error_flags inside the in-place k columns") {
    a->error_flags = (uint32_t *)((char *)TS(TK_K_OUT)->data + 4);
  } END
  MUT(TK_BASE_A, OVERLAP, "v_out|q_out", "v_out inside q_out") { qkvfuse_tensor *v = TS(TK_V_OUT); v->data = TS(TK_Q_OUT)->data; v->strides[0] = TS(TK_Q_OUT)->strides[0]; } END
  MUT(TK_BASE_A, OVERLAP, "v_out", "v_out in place on qkv's v columns") {
    qkvfuse_tensor *v = TS(TK_V_OUT), *x = TS(TK_QKV);
    v->data = (char *)x->data + (SP.Nq + SP.Nkv) * SP.D * 2;
    v->strides[0] = x->strides[0];
  } END
  MUT(TK_BASE_A, OVERLAP, "q_out", "q_out on qkv shifted by one head") {
    qkvfuse_tensor *q = TS(TK_Q_OUT), *x = TS(TK_QKV);
    q->data = (char *)x->data + SP.D * 2;
    q->strides[0] = x->strides[0];
  } END
  MUT(TK_BASE_C, OVERLAP, "q_out", "in-place q_out with another row stride") TS(TK_Q_OUT)->strides[0] -= 8; END
  MUT(TK_BASE_C, OVERLAP, "k_out|q_out", "k_out on the q columns") TS(TK_K_OUT)->data = TS(TK_Q_OUT)->data; END
  MUT(TK_BASE_C, OVERLAP, "v_cache|k_cache", "v_cache the same view as k_cache") *TS(TK_V_CACHE) = *TS(TK_K_CACHE); END
  /* ---- separate inputs ---- */
  MUT(ALL, INVALID_VALUE, "qkv", "qkv and q, k, v all given") { split_input(m); a->qkv = TS(TK_QKV); } END
  MUT(ALL, NULL_POINTER, "qkv", "no input at all") a->qkv = NULL; END
  MUT(ALL, NULL_POINTER, "k", "q without k") { split_input(m); a->k = NULL; } END
  MUT(TK_BASE_A | TK_BASE_B, NULL_POINTER, "v", "q and k without v, with a cache") { split_input(m); a->v = NULL; } END
  MUT(TK_BASE_A, DTYPE, "k", "k of another dtype than q") { split_input(m); TS(TK_K)->dtype = QKVFUSE_DTYPE_BFLOAT16; } END
  MUT(TK_BASE_B, DTYPE, "v", "float v with int32 q and k") { split_input(m); TS(TK_V)->dtype = QKVFUSE_DTYPE_FLOAT32; } END
  MUT(ALL, SHAPE, "k", "k with one token fewer than q") { split_input(m); TS(TK_K)->shape[0] -= 1; } END
  MUT(TK_BASE_A | TK_BASE_C, SHAPE, "v", "v one head short") { split_input(m); TS(TK_V)->shape[TS(TK_V)->ndim - 1] -= SP.D; } END
  MUT(TK_BASE_A, SHAPE, "q", "q of a k's width") { split_input(m); TS(TK_Q)->shape[1] = SP.Nkv * SP.D; } END
  MUT(TK_BASE_A, STRIDE, "k", "k with a row stride below its width") { split_input(m); TS(TK_K)->strides[0] = SP.D; } END
  MUT(TK_BASE_A, OVERLAP, "q_out", "q_out on the k tensor's rows") {
    split_input(m);
    TS(TK_Q_OUT)->data = TS(TK_K)->data;
    TS(TK_Q_OUT)->strides[0] = TS(TK_K)->strides[0];
  } END
  MUT(TK_BASE_C, OVERLAP, "k_out", "in-place k_out one element past k") {
    split_input(m);
    TS(TK_K_OUT)->data = (char *)TS(TK_K)->data + 2;
  } END
  MUT(TK_BASE_A, OVERLAP, "k_out|q_gamma", "k_out over an input (q_gamma)") {
    int64_t sh[2] = {SP.T, SP.Nkv * SP.D};
    a->q_gamma = extra1(m, QKVFUSE_DTYPE_FLOAT32, SP.D, 0, 1.0);
    a->k_out = extra(m, QKVFUSE_DTYPE_FLOAT32, 2, sh, 0, NAN);
  } END
  MUT(TK_BASE_A, OVERLAP, "k_cache|q_out", "q_out over the k cache") {
    qkvfuse_tensor *q = TS(TK_Q_OUT);
    int64_t sh[2] = {SP.T, SP.Nq * SP.D};
    *q = *extra(m, QKVFUSE_DTYPE_FLOAT16, 2, sh, 0, NAN);
    int64_t cs[4] = {SP.blocks, SP.block_size, SP.Nkv, SP.D};
    a->k_cache = extra(m, QKVFUSE_DTYPE_INT8, 4, cs, 64, NAN);
  } END
  /* ---- page-table addressing: arguments ---- */
  MUT(TK_BASE_P, NULL_POINTER, "kv_indptr", "kv_indptr NULL with a page table") a->kv_indptr = NULL; END
  MUT(TK_BASE_P, NULL_POINTER, "kv_indices", "kv_indices NULL with a page table") a->kv_indices = NULL; END
  MUT(TK_BASE_P, NULL_POINTER, "batch_indices", "batch_indices NULL with a page table") a->batch_indices = NULL; END
  MUT(TK_BASE_P, NULL_POINTER, "kv_positions", "kv_positions NULL with a page table") a->kv_positions = NULL; END
  MUT(TK_BASE_P, NULL_POINTER, "kv_positions", "kv_positions.data NULL") TS(TK_KV_POSITIONS)->data = NULL; END
  MUT(TK_BASE_P, INVALID_VALUE, "slot_mapping", "slot_mapping with a page table") a->slot_mapping = extra1(m, I64, SP.T, 0, 1.0); END
  MUT(TK_BASE_P, NULL_POINTER, "slot_mapping", "slot addressing with a page table's tensors") d->cache_addressing = QKVFUSE_ADDRESS_SLOTS; END
  MUT(TK_BASE_A, INVALID_VALUE, "slot_mapping", "page_table addressing with slot_mapping") d->cache_addressing = QKVFUSE_ADDRESS_PAGE_TABLE; END
  MUT(TK_BASE_A, INVALID_VALUE, "kv_indptr", "kv_indptr with slot addressing") a->kv_indptr = extra1(m, I32, 2, 0, 0.0); END
  MUT(TK_BASE_C, INVALID_VALUE, "kv_indices", "kv_indices with slot addressing") a->kv_indices = extra1(m, I64, 4, 0, 0.0); END
  MUT(TK_BASE_A, INVALID_VALUE, "batch_indices", "batch_indices with slot addressing") a->batch_indices = extra1(m, I32, SP.T, 0, 0.0); END
  MUT(TK_BASE_D, INVALID_VALUE, "kv_positions", "kv_positions without a cache") a->kv_positions = extra1(m, I64, SP.T, 0, 0.0); END
  MUT(TK_BASE_B, INVALID_VALUE, "cache_addressing", "page_table with the contiguous layout") d->cache_addressing = QKVFUSE_ADDRESS_PAGE_TABLE; END
  MUT(TK_BASE_D, INVALID_VALUE, "cache_addressing", "page_table without a cache") d->cache_addressing = QKVFUSE_ADDRESS_PAGE_TABLE; END
  MUT(ALL, INVALID_VALUE, "cache_addressing", "cache_addressing 7") d->cache_addressing = (qkvfuse_cache_addressing)7; END
  MUT(TK_BASE_P, DTYPE, "kv_indptr", "kv_indptr float32") TS(TK_KV_INDPTR)->dtype = QKVFUSE_DTYPE_FLOAT32; END
  MUT(TK_BASE_P, DTYPE, "kv_indices", "kv_indices int8") TS(TK_KV_INDICES)->dtype = QKVFUSE_DTYPE_INT8; END
  MUT(TK_BASE_P, DTYPE, "batch_indices", "batch_indices float16") TS(TK_BATCH_INDICES)->dtype = QKVFUSE_DTYPE_FLOAT16; END
  MUT(TK_BASE_P, DTYPE, "kv_positions", "kv_positions bfloat16") TS(TK_KV_POSITIONS)->dtype = QKVFUSE_DTYPE_BFLOAT16; END
  MUT(TK_BASE_P, SHAPE, "batch_indices", "batch_indices [T-1]") TS(TK_BATCH_INDICES)->shape[0] = SP.T - 1; END
  MUT(TK_BASE_P, SHAPE, "kv_positions", "kv_positions [T+1]") TS(TK_KV_POSITIONS)->shape[0] = SP.T + 1; END
  MUT(TK_BASE_P, SHAPE, "kv_indptr", "kv_indptr with no element") TS(TK_KV_INDPTR)->shape[0] = 0; END
  MUT(TK_BASE_P, STRIDE, "kv_indices", "kv_indices with stride 2") { qkvfuse_tensor *t = TS(TK_KV_INDICES); t->shape[0] /= 2; t->strides[0] = 2; } END
  MUT(TK_BASE_P, ALIGNMENT, "kv_indices", "int64 kv_indices misaligned by 4 bytes") TS(TK_KV_INDICES)->data = (char *)TS(TK_KV_INDICES)->data + 4; END
  MUT(TK_BASE_P, DEVICE, "batch_indices", "a CUDA batch_indices with a CPU plan") TS(TK_BATCH_INDICES)->device_type = QKVFUSE_DEVICE_CUDA; END
  MUT(TK_BASE_P, OVERLAP, "error_flags", "error_flags on kv_indptr") a->error_flags = (uint32_t *)TS(TK_KV_INDPTR)->data; END
  MUT(TK_BASE_P, OVERLAP, "k_out", "k_out over kv_indices") {
    int64_t sh[2] = {SP.T, SP.Nkv * SP.D}, n = 8;
    a->k_out = extra(m, QKVFUSE_DTYPE_BFLOAT16, 2, sh, 0, NAN);
    a->kv_indices = extra(m, I64, 1, &n, 64, 1.0);
  } END
  /* ---- page-table addressing: data (all QKVFUSE_DATA_ERROR_SLOT) ---- */
  MUT(TK_BASE_P, OUT_OF_RANGE, "batch_indices", "batch index = batch") { known_table(m); poke(m, TK_BATCH_INDICES, 2, 3); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "batch_indices", "batch index -2") { known_table(m); poke(m, TK_BATCH_INDICES, 5, -2); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "kv_positions", "kv position -1") { known_table(m); poke(m, TK_KV_POSITIONS, 0, -1); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "kv_positions", "kv position past its sequence's blocks") { known_table(m); poke(m, TK_KV_POSITIONS, 1, 8); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "kv_positions", "kv position 2^40") { known_table(m); poke(m, TK_KV_POSITIONS, 3, 1099511627776.0); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "kv_indptr", "kv_indptr decreasing") { known_table(m); poke(m, TK_KV_INDPTR, 2, 1); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "kv_indptr", "kv_indptr[0] negative") { known_table(m); poke(m, TK_KV_INDPTR, 0, -1); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "kv_indices", "a block past the end of kv_indices") {
    known_table(m);
    poke(m, TK_KV_INDPTR, 2, 7), poke(m, TK_KV_INDPTR, 3, 10); /* sequence 2: entries 7..9 of 8; position 6 reads entry 8 */
    e->flag = QKVFUSE_DATA_ERROR_SLOT;
  } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "kv_indices", "a block number = blocks") { known_table(m); poke(m, TK_KV_INDICES, 1, 9); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "kv_indices", "a block number -1") { known_table(m); poke(m, TK_KV_INDICES, 4, -1); e->flag = QKVFUSE_DATA_ERROR_SLOT; } END
  MUT(TK_BASE_P, OUT_OF_RANGE, "positions", "position, batch index and k_scale all bad") {
    known_table(m);
    poke(m, TK_POSITIONS, 4, (double)SP.max_pos);
    poke(m, TK_BATCH_INDICES, 0, 9);
    poke(m, TK_K_SCALE, 0, 0.0);
    e->flag = QKVFUSE_DATA_ERROR_POSITION | QKVFUSE_DATA_ERROR_SLOT | QKVFUSE_DATA_ERROR_SCALE;
  } END
  return -1;
}

/* ---------------------------------------------------------------------- */

static const char *base_name(int b) {
  return b == TK_BASE_A ? "A" : b == TK_BASE_B ? "B" : b == TK_BASE_C ? "C" : b == TK_BASE_D ? "D"
         : b == TK_BASE_F ? "F" : "P";
}

/* One mutation on one base: 1 pass, 0 not applicable, -1 fail, -2 past the end. */
static int run_one(int base, int id, qkvfuse_backend be, int verbose) {
  tk_spec sp;
  tk_base_spec(base, &sp);
  tk_case c;
  if (tk_case_build(&c, &sp, 1000 + (uint64_t)base)) return -1;
  const tk_device *dev = tk_device_for_backend(be);
  tk_case_upload(&c, dev);
  static mctx m;
  memset(&m, 0, sizeof m);
  m.c = &c;
  m.desc = c.desc;
  m.desc.backend = be;
  m.desc.device_type = dev->type; /* the plan lives where the case's tensors were uploaded */
  m.desc.device_id = dev->id;
  tk_case_args(&c, TK_AT_DEVICE, m.tens, &m.args);
  m.extra = (uint8_t *)aligned_alloc(256, EXTRA_BYTES);
  m.extra_init = (uint8_t *)malloc(EXTRA_BYTES);
  tk_rng r;
  tk_rng_seed(&r, 99);
  tk_fill_poison(&r, m.extra, EXTRA_BYTES);
  memcpy(m.extra_init, m.extra, EXTRA_BYTES);
  expect e;
  int applied = mutate(id, base, &m, &e), rc = 1;
  /* on CUDA: argument errors only (data errors are flags there: test_cuda_data), with
   * every tensor in device memory (the extra buffer and the device checks are host's) */
  if (applied > 0 && be == QKVFUSE_BACKEND_CUDA && (e.flag || m.nxt || e.want == QKVFUSE_ERROR_DEVICE)) applied = 0;
  if (applied > 0 && be != QKVFUSE_BACKEND_CUDA && e.cuda_only) applied = 0;
  if (applied <= 0) {
    free(m.extra), free(m.extra_init);
    tk_case_free(&c);
    return applied < 0 ? -2 : 0;
  }
  if (m.reupload) tk_case_upload(&c, dev);
  qkvfuse_plan *p = NULL;
  qkvfuse_status st = qkvfuse_plan_create(m.null_desc ? NULL : &m.desc, m.null_plan_out ? NULL : &p);
  if (st == QKVFUSE_SUCCESS) {
    st = qkvfuse_run(m.null_plan ? NULL : p, m.null_args ? NULL : &m.args, dev->stream);
    qkvfuse_plan_destroy(p);
  }
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", qkvfuse_last_error() ? qkvfuse_last_error() : "(null)");
  tk_stats s;
  memset(&s, 0, sizeof s);
  if (st != e.want)
    tk_stats_fail(&s, "status %s, want %s", qkvfuse_status_string(st), qkvfuse_status_string(e.want));
  else if (!msg[0])
    tk_stats_fail(&s, "empty qkvfuse_last_error()");
  else if (!tk_names_argument(msg, e.names))
    tk_stats_fail(&s, "message does not name '%s'", e.names);
  else if (e.mention && !strstr(msg, e.mention))
    tk_stats_fail(&s, "message does not say \"%s\"", e.mention);
  tk_case_download(&c);
  for (int b = 0; b < TK_NSLOT; b++)
    if (c.buf[b].bytes) tk_cmp_untouched(&s, tk_slot_name[b], c.buf[b].got, c.buf[b].init, NULL, c.buf[b].bytes);
  tk_cmp_untouched(&s, "extra buffer", m.extra, m.extra_init, NULL, EXTRA_BYTES);
  if (c.buf[TK_FLAGS_BUF].bytes) {
    uint32_t f;
    memcpy(&f, c.buf[TK_FLAGS_BUF].got, 4);
    if ((f & e.flag) != e.flag) tk_stats_fail(&s, "error_flags 0x%x lacks bits 0x%x of these data errors", f, e.flag);
    if (!e.flag && f) tk_stats_fail(&s, "error_flags 0x%x after an argument error", f);
  }
  if (s.failed) {
    printf("FAIL test_errors backend=%s base=%s mutation #%d (%s): %s\n  message: \"%s\"\n", tk_backend_str(be),
           base_name(base), id, e.what, s.first, msg);
    rc = -1;
  } else if (verbose) {
    printf("ok   base=%s #%d %-50s %s: %s\n", base_name(base), id, e.what, qkvfuse_status_string(st), msg);
  }
  free(m.extra), free(m.extra_init);
  tk_case_free(&c);
  return rc;
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  int nbe = tk_backends_from(argc, argv, bes, 8), verbose = tk_arg_has(argc, argv, "--verbose");
  if (!nbe) return 2;
  for (int bi = 0; bi < nbe; bi++)
    if (!tk_device_for_backend(bes[bi])) {
      printf("test_errors: no device for backend %s, skipped\n", tk_backend_str(bes[bi]));
      return TK_SKIP;
    }
  static const int bases[] = {TK_BASE_A, TK_BASE_B, TK_BASE_C, TK_BASE_D, TK_BASE_F, TK_BASE_P};
  int failed = 0, passed = 0;
  for (int bi = 0; bi < nbe; bi++) {
    for (int k = 0; k < 5; k++) {
      /* the unmutated base must be valid and correct, or its mutations prove nothing */
      tk_spec sp;
      tk_base_spec(bases[k], &sp);
      tk_case c;
      tk_case_build(&c, &sp, 1000 + (uint64_t)bases[k]);
      tk_stats s;
      memset(&s, 0, sizeof s);
      if (tk_check_case(&c, bes[bi], tk_run_core, NULL, &s) != TK_PASS) {
        printf("FAIL test_errors backend=%s base=%s itself: %s\n", tk_backend_str(bes[bi]), base_name(bases[k]), s.first);
        failed++;
      }
      tk_case_free(&c);
      for (int id = 0;; id++) {
        int r = run_one(bases[k], id, bes[bi], verbose);
        if (r == -2) break;
        if (r == 1) passed++;
        if (r == -1) failed++;
      }
    }
  }
  printf("test_errors: %d bad-input checks passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
