/* SPDX-License-Identifier: Apache-2.0 */
/* Test cases: a spec (every option of one call), random specs, and the
 * buffers and strided views a spec builds (inputs filled from a seed, outputs
 * and caches filled with a non-zero poison). */
#ifndef TK_CASE_H
#define TK_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "qkvfuse.h"
#include "rng.h"

/* The tensors of qkvfuse_args, in its order. */
enum tk_slot {
  TK_QKV, TK_WEIGHT_SCALE, TK_ACT_SCALE, TK_BIAS, TK_Q_GAMMA, TK_K_GAMMA, TK_Q_BETA, TK_K_BETA,
  TK_POSITIONS, TK_COS_SIN_CACHE, TK_COS, TK_SIN, TK_SLOT_MAPPING, TK_K_SCALE, TK_V_SCALE, TK_K_OFFSET,
  TK_V_OFFSET, TK_Q_OUT, TK_K_OUT, TK_V_OUT, TK_K_CACHE, TK_V_CACHE, TK_Q, TK_K, TK_V, TK_Q_SCALE,
  TK_KV_INDPTR, TK_KV_INDICES, TK_BATCH_INDICES, TK_KV_POSITIONS, TK_NSLOT
};
extern const char *const tk_slot_name[TK_NSLOT]; /* the qkvfuse_args field names */
#define TK_FLAGS_BUF TK_NSLOT                    /* buffer of args.error_flags */

typedef struct tk_spec {
  int64_t Nq, Nkv, D, R; /* R = 0 without RoPE */
  int64_t T, B, S;       /* T = B * S when in3d (always for the contiguous layout) */
  int in3d;              /* qkv (and q_out/k_out/v_out, cos/sin) given as [B, S, ...]; S == 1 && in3d == 2: [B, H] */

  qkvfuse_dtype qkv_dt, q_out_dt, k_out_dt, v_out_dt; /* k_out/v_out NONE: absent */
  qkvfuse_dtype q_gamma_dt, k_gamma_dt, q_beta_dt, k_beta_dt; /* beta NONE: absent */
  qkvfuse_dtype bias_dt;  /* int32 input only; NONE: absent */
  int act_scale;          /* int32 input: act_scale given */
  qkvfuse_dtype rope_dt;  /* cos_sin_cache or cos/sin */
  qkvfuse_dtype pos_dt, slot_dt;
  qkvfuse_dtype k_cache_dt, v_cache_dt;

  int q_norm, k_norm, gamma_offset;
  float eps;
  qkvfuse_rope_source rope_source;
  qkvfuse_rope_style rope_style;
  double rope_theta;
  qkvfuse_rope_scaling scaling;
  int64_t max_pos;         /* COS_SIN_CACHE rows */
  int64_t pos_lo, pos_hi;  /* positions drawn from [pos_lo, pos_hi] */

  qkvfuse_cache_layout layout;
  qkvfuse_quant_mode k_quant, v_quant;
  int k_scale_kind, v_scale_kind; /* 0: [1], 1: scalar (ndim 0), 2: [Nkv, D], 3: [Nkv*D], 4: [Nkv] (per head) */
  qkvfuse_quant_mode q_quant;     /* NONE, FP8_E4M3 or FP8_E5M2: q_out of that fp8 dtype, args.q_scale */
  int q_scale_kind;               /* 0: [1], 1: scalar (ndim 0) */
  int64_t blocks, block_size;     /* paged / paged_hnd / nz */
  int64_t cache_batch, max_seq;   /* contiguous */
  double skip_prob;               /* probability of slot -1 (batch index -1 with a page table) */
  int page_slots;                 /* slot_mapping (paged / paged_hnd / nz): consecutive tokens fill whole pages
                                     taken in random order, as a paged engine lays out a prefill (else each token
                                     a random free slot) */
  int exact_blocks;               /* paged / paged_hnd / nz with slot_mapping: the caches have exactly the blocks
                                     the tokens need (else one spare block no token writes) */
  qkvfuse_cache_addressing addressing; /* paged / paged_hnd / nz: slot_mapping or a page table */
  int64_t pt_batch;               /* page table: sequences (kv_indptr has pt_batch + 1 entries; 0: every token
                                     skipped) */
  int64_t pt_prefix;              /* each sequence's positions before the call's tokens: drawn from [0, pt_prefix] */
  int64_t pt_lead, pt_tail;       /* unread kv_indices entries before kv_indptr[0] and after kv_indptr[batch] */
  int pt_interleave;              /* the sequences' tokens in random order (else sequence by sequence) */
  qkvfuse_dtype pt_dt[4];         /* dtypes of kv_indptr, kv_indices, batch_indices, kv_positions */
  qkvfuse_rounding rounding;

  int split_inputs;               /* 0: one qkv tensor; q, k, v tensors (args.q/k/v) that are 1: views of one
                                     packed [T, H] buffer, 2: three buffers of their own row padding, 3: as 2
                                     without v (nothing reads it) */
  int in_place_q, in_place_k;     /* q_out / k_out are the q / k columns of qkv (the q / k tensors) */
  int64_t qkv_pad, out_pad, rope_pad; /* extra elements per row */
  int out_split_heads;            /* q_out/k_out/v_out as [T, N, D] */
  int cache_perm;                 /* 0..5: memory order of the caches' three outer dims */
  int64_t cache_pad;              /* padding added to each cache stride */
  int kv_interleaved;             /* k/v caches are views [:,0] / [:,1] of one buffer */
  int error_flags;                /* pass args.error_flags */
  double amp;                     /* magnitude of the inputs */
  int unit_gamma;                 /* norm weights of magnitude one (with gamma_offset: 1 + g = +-1), so that an op
                                     run again and again on its own output (in place) keeps its values' spread;
                                     other weights make the small ones decay into subnormals and zeros */
  int64_t acc_bits;               /* int32 input: |acc| < 2^acc_bits */
  uint64_t strided;               /* bit s (tk_slot): slot s as a view with an element stride of 2 or 3 (vectors;
                                     [Nkv, D] scales also a padded row stride), rows and caches with their last dim's
                                     stride 2 (one stride for all the input's parts and the in-place outputs) */
} tk_spec;

/* Limits of the random generator. */
typedef struct tk_limits {
  int64_t max_elems; /* cap on T * H */
  int wide;          /* 1: every spec has a head dim above 512 (else some: tk_spec_random) */
} tk_limits;

/* A small valid spec: float32 in and out, no stages. */
void tk_spec_default(tk_spec *s);
/* A random valid spec; every option value appears with non-negligible probability.
 * One spec in 16 (every one with lim->wide) has a head dim above 512: 528,
 * 640, 1024 or any even value up to 1024, R full or partial, with fewer heads
 * and tokens to stay under lim->max_elems; that draw comes from a stream of
 * its own, so that the other specs of a seed are as they would be without it. */
void tk_spec_random(tk_spec *s, tk_rng *r, const tk_limits *lim);
/* Turns a random spec into the call an inference engine makes (vLLM, SGLang):
 * 16-bit input and outputs, RoPE from a cos_sin_cache of the input's dtype
 * (in three cases of ten float32) by int64 positions, norm weights of the
 * input's dtype and no beta, fused rounding, and a paged cache of whole rows
 * (NHD, unpadded) with int8-symmetric, fp8 e4m3 or fp8 e5m2 k and v and
 * int64 slots; an unquantized q; D, R multiples of 16, rows of whole 16-byte
 * vectors. The rest (shapes, T, pairs, scale kinds, skipped slots) stays as
 * drawn. */
void tk_spec_engine(tk_spec *s, tk_rng *r);
/* Turns a random spec into FlashInfer's append call
 * (rope_quantize_fp8_append_paged_kv_cache): 16-bit input, RoPE from a
 * float32 cos_sin_cache by int32 positions, q written as fp8 e4m3, k and v
 * through a page table into paged (NHD or HND) e4m3 caches, norm weights
 * (where drawn, in half the cases: FlashInfer's call has none) of the
 * input's dtype and no beta, fused rounding; D, R multiples of 16 (D up to
 * 512), rows of whole 16-byte vectors. The rest
 * (shapes, T, pairs, scale kinds, the page table, cache order and padding,
 * k and v outputs) stays as drawn. */
void tk_spec_append(tk_spec *s, tk_rng *r);
/* Turns a random spec into the int32 call (DequantRopeQuantKvcache's):
 * int32 input (act_scale in seven cases of ten), RoPE from cos and sin
 * given per token as rows of the outputs' dtype (bf16 or fp16: q's, and k's
 * and v's where drawn), norm weights of that dtype and no beta, fused
 * rounding, and a paged cache of whole rows (NHD, unpadded) with int8
 * symmetric, fp8 e4m3 or fp8 e5m2 k and v and int64 slots; D, R multiples
 * of 16 (D up to 512), rows of whole 8-element vectors. The rest (shapes,
 * T, pairs, norms, scale kinds, skipped slots) stays as drawn. */
void tk_spec_dequant(tk_spec *s, tk_rng *r);
/* Make derived fields consistent (cache sizes, in-place legality...). Tests
 * call it after editing a spec. */
void tk_spec_fixup(tk_spec *s);
/* Page table: a bound on the blocks its sequences take (kv_indices holds
 * pt_lead + this + pt_tail entries; the caches have more blocks). */
int64_t tk_pt_pages(const tk_spec *s);
/* One line describing the spec (for failure messages). */
void tk_spec_describe(const tk_spec *s, char *buf, size_t n);
/* A rounding mode's name as Python and the tests spell it ("fused", "unfused_parity",
 * "ascend_triton", "cann"); "?" for a value out of range. */
const char *tk_rounding_name(qkvfuse_rounding r);

/* A CPU call copies its strided vectors into one buffer of this many bytes,
 * each rounded up to 64 bytes (docs/API.md, "Strides"). */
#define TK_GATHER_BYTES 65536
/* 1 for the vector arguments (weights, scales, offsets, indices), 0 for rows
 * (inputs, cos/sin, outputs) and caches. */
int tk_slot_is_vector(int slot);
/* The slots a case of s has (bit per tk_slot). */
uint64_t tk_spec_present(const tk_spec *s);
/* The bytes the copies of s's strided vectors take: each one whose view is
 * not contiguous, n elements rounded up to 64 bytes. */
int64_t tk_spec_gather_bytes(const tk_spec *s);
/* Clear the strided bits of s's vectors, the largest copy first, until the
 * copies fit TK_GATHER_BYTES. */
void tk_spec_fit_gather(tk_spec *s);

typedef struct tk_buf {
  uint8_t *init; /* host: initial bytes (inputs: data, outputs: poison) */
  uint8_t *got;  /* host: bytes after the run */
  void *dev;     /* device copy (NULL until tk_case_upload) */
  size_t bytes;
} tk_buf;

typedef struct tk_view {
  int present;
  int buf;          /* buffer index */
  int64_t off;      /* element offset into the buffer */
  qkvfuse_tensor t; /* shape, strides, dtype; data is set by tk_case_args */
} tk_view;

typedef struct tk_case {
  tk_spec sp;
  uint64_t seed;
  qkvfuse_desc desc;
  tk_buf buf[TK_NSLOT + 1];
  tk_view view[TK_NSLOT];
  const tk_device *dev;
} tk_case;

/* Build buffers, data and views of spec sp (host only). 0 on success. */
int tk_case_build(tk_case *c, const tk_spec *sp, uint64_t seed);
/* Draw the case's positions and slot_mapping again from r into its initial
 * bytes (a benchmark's rotated instances: the same tensors at other indices).
 * -1 (nothing changed) for the contiguous layout and page tables. */
int tk_case_redraw_indices(tk_case *c, tk_rng *r);
/* Set element `flat` (row-major) of slot's view in the initial bytes to v,
 * rounded to its dtype: a test's edit of a built case, uploaded with it. */
void tk_case_poke(tk_case *c, int slot, int64_t flat, double v);
/* Allocate the device copies and upload the initial bytes (again, if called
 * twice: a case can be re-run from its initial state). A buffer whose .dev is
 * already set (memory its caller owns: set it back to NULL before
 * tk_case_free) is uploaded into, not allocated. 0 on success. */
int tk_case_upload(tk_case *c, const tk_device *dev);
/* Download every buffer into .got. */
int tk_case_download(tk_case *c);
void tk_case_free(tk_case *c);

enum tk_where { TK_AT_DEVICE, TK_AT_INIT, TK_AT_GOT };
/* Point tens[] (one per slot) and *args at the case's buffers: on the device,
 * or the host's initial / after-run bytes. Absent slots are NULL in args. */
void tk_case_args(tk_case *c, enum tk_where where, qkvfuse_tensor tens[TK_NSLOT], qkvfuse_args *args);

/* The field of args that holds slot `slot`. */
const qkvfuse_tensor **tk_args_field(qkvfuse_args *a, int slot);

/* Fill n bytes with non-zero random bytes. */
void tk_fill_poison(tk_rng *r, uint8_t *p, size_t n);

#endif /* TK_CASE_H */
