/* SPDX-License-Identifier: Apache-2.0 */
/*
 * qkvfuse: fused attention-prologue operators for LLM inference.
 *
 * One operator, stages chosen by a descriptor, applied to the output of the
 * fused QKV projection, token by token:
 *
 *   split q/k/v -> (dequant int32) -> per-head RMSNorm on q and k -> RoPE on q
 *   and k -> (quantize k and v) -> write q_out, optional k_out/v_out, and
 *   scatter k and v into a KV cache.
 *
 * The contract of every stage is SPEC.md (shipped as docs/SPEC.md); the
 * choices this header makes where SPEC.md is silent are written next to the
 * field they concern and collected in docs/API.md.
 *
 * Conventions
 *   - Shapes are written [dim0, dim1, ...], outermost first. T is the number of
 *     tokens, Nq/Nkv the query and key/value heads, D the head dim, R the rotary
 *     dims, H = (Nq + 2*Nkv) * D the width of one qkv row.
 *   - Strides are in elements, like DLPack. The elements of a row ([T, X]
 *     tensors and their views) and of a cache's last dim have stride 1 (any
 *     stride on the reference backend); vectors (weights, scales, offsets,
 *     indices) may have any strides on CPU plans, which copy strided ones
 *     into a 64 KiB buffer of the call, and are contiguous on CUDA; outer
 *     dimensions may have any non-negative stride that keeps written elements
 *     distinct (docs/API.md, "Strides").
 *   - All sizes and index arithmetic are 64-bit.
 *   - Every function returns a qkvfuse_status; on anything but QKVFUSE_SUCCESS,
 *     qkvfuse_last_error() (thread-local) names the argument, what was expected
 *     and what was given, and no output or cache byte has changed.
 *   - Thread safety: plans are immutable after creation; qkvfuse_run may be
 *     called on one plan from many threads (and CUDA streams) at once.
 *   - No function here allocates or synchronizes inside qkvfuse_run; a CUDA-graph
 *     capture of qkvfuse_run (and of the named one-call operators) is valid.
 *
 * The library is C11 with a C ABI; this header is valid C and C++.
 */
#ifndef QKVFUSE_H
#define QKVFUSE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version and ABI policy.
 *
 * These three macros are the one source of the version: CMake's project
 * version must equal them (the configure step checks) and the Python wheel
 * reads them (pyproject.toml). Releases are tagged vMAJOR.MINOR.PATCH and
 * listed in CHANGELOG.md.
 *
 *   - The shared library's SOVERSION is MAJOR (libqkvfuse.so.MAJOR): one
 *     major version is one ABI.
 *   - Within a major version, what this header promises stays frozen:
 *     function signatures and their behaviour on valid input, enum values,
 *     the macros' values (the version's aside), and the layout of every
 *     struct at each of its *_VERSION numbers. A MINOR release only adds
 *     (functions, enum values, fields at the end of a struct under a new
 *     struct version; struct_size/version tell the library which one a
 *     caller filled); a PATCH release changes no declaration.
 *   - So a program built against MAJOR.MINOR runs with any library of the
 *     same MAJOR and an equal or later MINOR; qkvfuse_version_number() says
 *     which one it got. Anything not declared here (src/ headers, the static
 *     library's internal symbols, the CLI's output) is not part of the ABI.
 *   - Breaking any of this takes a new MAJOR, hence a new SOVERSION. */
#define QKVFUSE_VERSION_MAJOR 0
#define QKVFUSE_VERSION_MINOR 2
#define QKVFUSE_VERSION_PATCH 0
#define QKVFUSE_VERSION_NUMBER \
  (QKVFUSE_VERSION_MAJOR * 10000 + QKVFUSE_VERSION_MINOR * 100 + QKVFUSE_VERSION_PATCH)

#if defined(_WIN32) && defined(QKVFUSE_BUILDING_SHARED)
#define QKVFUSE_API __declspec(dllexport)
#elif defined(__GNUC__) && defined(QKVFUSE_BUILDING)
#define QKVFUSE_API __attribute__((visibility("default")))
#else
#define QKVFUSE_API
#endif

/** @return QKVFUSE_VERSION_NUMBER of the library actually linked. */
QKVFUSE_API unsigned qkvfuse_version_number(void);

/** What this library was built with, as one JSON object (UTF-8, no newline):
 *
 *   {"version": "0.2.0",
 *    "cuda": "13.0.88",                     the CUDA toolkit compiled against; null without the CUDA backend
 *    "cuda_architectures": ["80", "90"],    CMAKE_CUDA_ARCHITECTURES of the build, one string each; [] without CUDA
 *    "cpu_isa": {"compiled": ["scalar", "avx2", "avx512", "avx512bf16"],
 *                "detected": "avx512bf16"}, the CPU backend's kernels built in, and the best of them this CPU
 *                                           and OS can run (what the auto choice takes when QKVFUSE_CPU_ISA is
 *                                           unset); [] and null without the CPU backend
 *    "backends": ["reference", "cpu", "cuda"]}
 *
 * Keys may be added (and only added) in later versions. The string is built
 * on the first call (thread-safe), lives as long as the library and never
 * changes; it asks no GPU anything. */
QKVFUSE_API const char *qkvfuse_build_info(void);

/* ------------------------------------------------------------------------- */
/* Status codes. The numbers are frozen: new codes are only ever appended.    */
/* ------------------------------------------------------------------------- */

/* An enum numbered from 0 ends with a *_COUNT enumerator: the number of its
 * values, itself not a valid value, raised when a value is appended (a range
 * check is (unsigned)v < *_COUNT). qkvfuse_dtype and qkvfuse_device_type hold
 * DLPack codes, not a range, and have none. */
typedef enum qkvfuse_status {
  QKVFUSE_SUCCESS = 0,
  QKVFUSE_ERROR_NULL_POINTER = 1,   /* a required pointer (tensor, data, plan) is NULL */
  QKVFUSE_ERROR_INVALID_VALUE = 2,  /* an option or scalar is out of range (D, R, eps, enum...) */
  QKVFUSE_ERROR_DTYPE = 3,          /* a tensor's dtype is not allowed there */
  QKVFUSE_ERROR_SHAPE = 4,          /* a tensor's shape does not match */
  QKVFUSE_ERROR_STRIDE = 5,         /* a tensor's strides are not supported (see conventions) */
  QKVFUSE_ERROR_ALIGNMENT = 6,      /* a data pointer is not aligned to its element size */
  QKVFUSE_ERROR_OVERLAP = 7,        /* an output overlaps an input or another output */
  QKVFUSE_ERROR_OUT_OF_RANGE = 8,   /* data-dependent: a position, slot or index outside its table */
  QKVFUSE_ERROR_BAD_SCALE = 9,      /* data-dependent: a zero or non-finite quantization scale/offset */
  QKVFUSE_ERROR_DEVICE = 10,        /* tensors on different devices, or a device the plan was not made for */
  QKVFUSE_ERROR_UNSUPPORTED = 11,   /* valid request this build cannot serve (e.g. CUDA tensors, no CUDA) */
  QKVFUSE_ERROR_CUDA = 12,          /* the CUDA runtime reported an error (message carries it) */
  QKVFUSE_ERROR_OUT_OF_MEMORY = 13, /* host allocation failed (plan creation; a named operator's strict
                                       index check) */
  QKVFUSE_ERROR_VERSION = 14,       /* a struct's struct_size/version is not one this library knows */
  QKVFUSE_STATUS_COUNT              /* the number of statuses above: not a valid value (range checks) */
} qkvfuse_status;

/** @return a static, human-readable name for a status ("QKVFUSE_ERROR_SHAPE"). */
QKVFUSE_API const char *qkvfuse_status_string(qkvfuse_status status);

/**
 * @return the message of the last failed call on this thread (thread-local,
 * valid until the next qkvfuse call on this thread), or "" if the last call
 * succeeded. Example: "k_cache: shape[2] must be num_kv_heads = 8 for layout
 * paged [blocks, block_size, Nkv, D]; got 4".
 */
QKVFUSE_API const char *qkvfuse_last_error(void);

/* ------------------------------------------------------------------------- */
/* Tensors: a DLPack-compatible descriptor.                                    */
/* ------------------------------------------------------------------------- */

/* dtype = (DLPack type code << 8) | bits, lanes = 1: the mapping to DLPack's
 * (code, bits, lanes) is one-to-one in both directions. 0 means "none". */
#define QKVFUSE_DTYPE_CODE(dlpack_code, bits) (((dlpack_code) << 8) | (bits))
typedef enum qkvfuse_dtype {
  QKVFUSE_DTYPE_NONE = 0,
  QKVFUSE_DTYPE_INT8 = QKVFUSE_DTYPE_CODE(0, 8),         /* kDLInt      */
  QKVFUSE_DTYPE_INT32 = QKVFUSE_DTYPE_CODE(0, 32),       /* kDLInt      */
  QKVFUSE_DTYPE_INT64 = QKVFUSE_DTYPE_CODE(0, 64),       /* kDLInt      */
  QKVFUSE_DTYPE_FLOAT16 = QKVFUSE_DTYPE_CODE(2, 16),     /* kDLFloat    */
  QKVFUSE_DTYPE_FLOAT32 = QKVFUSE_DTYPE_CODE(2, 32),     /* kDLFloat    */
  QKVFUSE_DTYPE_BFLOAT16 = QKVFUSE_DTYPE_CODE(4, 16),    /* kDLBfloat   */
  QKVFUSE_DTYPE_FLOAT8_E4M3FN = QKVFUSE_DTYPE_CODE(10, 8), /* kDLFloat8_e4m3fn (OCP, no inf) */
  QKVFUSE_DTYPE_FLOAT8_E5M2 = QKVFUSE_DTYPE_CODE(12, 8)    /* kDLFloat8_e5m2 (OCP, with inf) */
} qkvfuse_dtype;

/** @return the dtype for DLPack (code, bits, lanes), or QKVFUSE_DTYPE_NONE if
 *  the library does not handle that type. */
QKVFUSE_API qkvfuse_dtype qkvfuse_dtype_from_dlpack(uint8_t code, uint8_t bits, uint16_t lanes);
/** @return size of one element in bytes (0 for an unknown dtype). */
QKVFUSE_API size_t qkvfuse_dtype_size(qkvfuse_dtype dtype);
/** @return a static name: "float32", "bfloat16", "float8_e4m3fn", ... ("?" if unknown). */
QKVFUSE_API const char *qkvfuse_dtype_name(qkvfuse_dtype dtype);

/* Device types use DLPack's DLDeviceType numbers. */
typedef enum qkvfuse_device_type {
  QKVFUSE_DEVICE_CPU = 1,  /* kDLCPU  */
  QKVFUSE_DEVICE_CUDA = 2  /* kDLCUDA */
} qkvfuse_device_type;

#define QKVFUSE_MAX_DIMS 6

/* A strided view of memory. The element at index (i0, ..., i{n-1}) lives at
 * (char *)data + sizeof(element) * sum_k i_k * strides[k]. */
typedef struct qkvfuse_tensor {
  void *data;                          /* first element; may be NULL only if the tensor has 0 elements */
  qkvfuse_dtype dtype;
  qkvfuse_device_type device_type;
  int32_t device_id;                   /* CUDA ordinal; 0 for CPU */
  int32_t ndim;                        /* 0..QKVFUSE_MAX_DIMS (0 = scalar, one element) */
  int64_t shape[QKVFUSE_MAX_DIMS];     /* sizes, each >= 0 */
  int64_t strides[QKVFUSE_MAX_DIMS];   /* in elements, each >= 0 */
} qkvfuse_tensor;

/**
 * Fill *t as a row-major contiguous tensor on the CPU (device_type CPU, id 0).
 * Convenience for callers who do not have a DLPack tensor at hand; set
 * device_type/device_id afterwards for device memory.
 * @return QKVFUSE_SUCCESS; QKVFUSE_ERROR_INVALID_VALUE if ndim is out of range;
 *         QKVFUSE_ERROR_SHAPE if a size is negative or the tensor would span more
 *         than 2^62 elements or bytes (zero sizes counted as 1). *t is written
 *         only on success.
 */
QKVFUSE_API qkvfuse_status qkvfuse_tensor_init(qkvfuse_tensor *t, void *data, qkvfuse_dtype dtype,
                                               int32_t ndim, const int64_t *shape);

/* ------------------------------------------------------------------------- */
/* Options.                                                                    */
/* ------------------------------------------------------------------------- */

/* Where the per-token cos/sin of RoPE come from. */
typedef enum qkvfuse_rope_source {
  QKVFUSE_ROPE_NONE = 0,          /* no RoPE (rotary_dim must be 0) */
  QKVFUSE_ROPE_COS_SIN_CACHE = 1, /* args.cos_sin_cache [max_pos, R] + args.positions [T] (vLLM) */
  QKVFUSE_ROPE_COS_SIN = 2,       /* args.cos [T, R] and args.sin [T, R], full length (CANN) */
  QKVFUSE_ROPE_COMPUTED = 3,      /* from desc.rope_theta + desc.rope_scaling and args.positions [T] */
  QKVFUSE_ROPE_SOURCE_COUNT       /* the number of sources above: not a valid value */
} qkvfuse_rope_source;

/* Which dims of a head form a rotated pair. */
typedef enum qkvfuse_rope_style {
  QKVFUSE_ROPE_NEOX = 0,        /* pair i = (i, i + R/2), i < R/2 (GPT-NeoX, half split) */
  QKVFUSE_ROPE_INTERLEAVED = 1, /* pair i = (2i, 2i + 1) (GPT-J) */
  QKVFUSE_ROPE_STYLE_COUNT      /* the number of styles above: not a valid value */
} qkvfuse_rope_style;

/* Frequency scaling rules (for QKVFUSE_ROPE_COMPUTED and qkvfuse_build_cos_sin_cache).
 * The base inverse frequencies are inv_freq[i] = theta^(-2i/R), i < R/2. */
typedef enum qkvfuse_rope_scaling_type {
  QKVFUSE_ROPE_SCALING_NONE = 0,
  QKVFUSE_ROPE_SCALING_LINEAR = 1, /* position interpolation: inv_freq /= factor */
  QKVFUSE_ROPE_SCALING_NTK = 2,    /* static NTK-aware: theta' = theta * factor^(R/(R-2)) */
  QKVFUSE_ROPE_SCALING_LLAMA3 = 3, /* Llama 3.1 wavelength bands (factor, low/high_freq_factor,
                                      original_max_position) */
  QKVFUSE_ROPE_SCALING_YARN = 4,   /* YaRN ramp between interpolated and extrapolated
                                      frequencies (factor, beta_fast, beta_slow,
                                      original_max_position, extrapolation_factor); cos and
                                      sin are multiplied by mscale = (0.1 ln(factor) + 1) *
                                      attn_factor (1 when factor <= 1) */
  QKVFUSE_ROPE_SCALING_COUNT       /* the number of rules above: not a valid value */
} qkvfuse_rope_scaling_type;

typedef struct qkvfuse_rope_scaling {
  qkvfuse_rope_scaling_type type;
  double factor;                /* > 0; linear, ntk, llama3, yarn. 1 = no change */
  int64_t original_max_position;/* llama3 and yarn: the training context, > 0 */
  double low_freq_factor;       /* llama3 (Llama 3.1: 1) */
  double high_freq_factor;      /* llama3 (Llama 3.1: 4), > low_freq_factor */
  double beta_fast;             /* yarn (default 32) */
  double beta_slow;             /* yarn (default 1) */
  double extrapolation_factor;  /* yarn (default 1) */
  double attn_factor;           /* yarn (default 1) */
} qkvfuse_rope_scaling;

#define QKVFUSE_ROPE_SCALING_INIT \
  { QKVFUSE_ROPE_SCALING_NONE, 1.0, 0, 1.0, 4.0, 32.0, 1.0, 1.0, 1.0 }

/* Quantization of k (after RoPE) and v into the caches, and of q into q_out.
 * k/v scales are float32, one per tensor (args.*_scale has 1 element: [1] or
 * a 0-dim scalar), one per kv head ([Nkv], head h's at [h]) or one per (kv
 * head, dim) channel ([Nkv, D] or flat [Nkv*D]); the granularity follows the
 * element count (with Nkv = 1, [Nkv] is per tensor); offsets have their
 * scale's count. q's scale is one per tensor. */
typedef enum qkvfuse_quant_mode {
  QKVFUSE_QUANT_NONE = 0,      /* cache dtype float32 / float16 / bfloat16: value rounded to it */
  QKVFUSE_QUANT_INT8_SYM = 1,  /* q = sat8(rint(x / scale)); int8 cache */
  QKVFUSE_QUANT_INT8_ASYM = 2, /* q = sat8(rint(x / scale + offset)); int8 cache, args.*_offset */
  QKVFUSE_QUANT_FP8_E4M3 = 3,  /* q = e4m3fn(x / scale), saturating to +-448; float8_e4m3fn cache */
  QKVFUSE_QUANT_FP8_E5M2 = 4,  /* q = e5m2(x / scale), saturating to +-57344; float8_e5m2 cache (vLLM's
                                  kv_cache_dtype "fp8_e5m2") */
  QKVFUSE_QUANT_COUNT          /* the number of modes above: not a valid value */
} qkvfuse_quant_mode;
/* fp8 rounds to nearest even and saturates as CUDA's __nv_cvt_float_to_fp8
 * with __NV_SATFINITE (vLLM's scaled_convert): whatever would round past the
 * largest finite value becomes it (e5m2: everything from 61440 on).
 * NaN in quantization: int8 modes write 0; fp8 writes its NaN keeping the sign
 * (e4m3fn 0x7F/0xFF, e5m2 0x7F/0xFF; that CUDA conversion alone writes 0x7F
 * for every NaN). +-Inf saturates (int8: 127/-128, e4m3: +-448, e5m2:
 * +-57344). */

/* Where token t's k and v rows go in args.k_cache / args.v_cache. The slot of
 * token t is args.slot_mapping[t]; -1 means "skip this token" (its q and k_out/
 * v_out rows are still written). c = 32 bytes / element size of the cache. */
typedef enum qkvfuse_cache_layout {
  QKVFUSE_CACHE_NONE = 0,       /* no caches */
  QKVFUSE_CACHE_PAGED = 1,      /* [blocks, block_size, Nkv, D]; slot s -> [s / block_size][s % block_size]
                                   (vLLM NHD; CANN "page": the cache viewed as [-1, Nkv, D], row s) */
  QKVFUSE_CACHE_PAGED_HND = 2,  /* [blocks, Nkv, block_size, D]; same block and row, head-major (FlashInfer HND) */
  QKVFUSE_CACHE_NZ = 3,         /* [blocks, Nkv*D/c, block_size, c]; element j = h*D + d of the token's row ->
                                   [s / block_size][j / c][s % block_size][j % c] (CANN PA_NZ) */
  QKVFUSE_CACHE_CONTIGUOUS = 4, /* [batch, max_seq, Nkv, D]; the input is [B, S, H] (or [B, H], S = 1) and
                                   slot_mapping is [B] start indices: token t = b*S + i -> [b][slot_mapping[b] + i]
                                   (CANN contiguous); slot_mapping[b] = -1 skips batch b */
  QKVFUSE_CACHE_LAYOUT_COUNT    /* the number of layouts above: not a valid value */
} qkvfuse_cache_layout;

/* How a token finds its cache row (paged, paged_hnd and nz layouts). */
typedef enum qkvfuse_cache_addressing {
  QKVFUSE_ADDRESS_SLOTS = 0,     /* args.slot_mapping [T]: slot s -> block s / block_size, row s % block_size */
  QKVFUSE_ADDRESS_PAGE_TABLE = 1, /* FlashInfer's paged append: token t of sequence b = args.batch_indices[t]
                                    at position p = args.kv_positions[t] goes to block
                                    args.kv_indices[args.kv_indptr[b] + p / block_size], row p % block_size;
                                    sequence b's blocks are kv_indices[kv_indptr[b] .. kv_indptr[b + 1]).
                                    batch_indices[t] = -1 skips the token's cache rows */
  QKVFUSE_ADDRESS_COUNT          /* the number of addressings above: not a valid value */
} qkvfuse_cache_addressing;

/* Intermediate rounding: the order of roundings of one reference
 * implementation, so that results can be bit-identical to it. The formulas of
 * each mode are in docs/API.md ("Rounding modes"). Everything not named here
 * is float32 arithmetic, no fused multiply-add. */
typedef enum qkvfuse_rounding {
  QKVFUSE_ROUNDING_FUSED = 0,         /* float32 throughout, each output rounded once (RNE) */
  QKVFUSE_ROUNDING_UNFUSED_PARITY = 1, /* a PyTorch composition of separate ops (vllm-ascend's unfused path:
                                         rms_norm, + bias, rotary_embedding), float32 inside each op: round to
                                         the I/O dtype (q_out's) after the dequant (int32 input), after
                                         x * inv * g, after + beta, and after RoPE; k_out, v_out and the
                                         quantizers read those rounded values. Bit-identical to the
                                         stage-by-stage path (tools/unfused.c). With desc.q_quant the I/O
                                         dtype is the one q_out has unquantized: the input's, for int32 input
                                         the RoPE table's (float32 without a table); q is quantized from the
                                         rounded value. */
  QKVFUSE_ROUNDING_ASCEND_TRITON = 2, /* the vllm-ascend Triton kernel split_qkv_rmsnorm_rope (seed 000):
                                         x * (1 / sqrt(ss / D + eps)) * g (+ beta) in float32, rounded to
                                         bfloat16; cos and sin rounded to bfloat16; RoPE in bfloat16, each
                                         product and each sum rounded to bfloat16. Intermediates are bfloat16
                                         whatever the I/O dtype (the kernel's casts), outputs converted from
                                         them; v is a copy; int32 input is dequantized in float32, unrounded.
                                         ss: the float32 squares summed exactly, rounded once to float32 (no
                                         order of additions). CPU only (CUDA plans: QKVFUSE_ERROR_UNSUPPORTED) */
  QKVFUSE_ROUNDING_CANN = 3,          /* the CANN kernels QkvRmsNormRopeCache and DequantRopeQuantKvcache
                                         (seeds 001, 003): as UNFUSED_PARITY, with the norm
                                         y = (x / sqrt(ss / D + eps)) * g, ss summed as ASCEND_TRITON's; the
                                         caches quantize the rounded k and v that k_out / v_out
                                         (k_out_before_quant, kOut) hold. CPU only */
  QKVFUSE_ROUNDING_COUNT              /* the number of modes above: not a valid value */
} qkvfuse_rounding;

/* Which implementation runs. AUTO picks the fastest for the plan's device. */
typedef enum qkvfuse_backend {
  QKVFUSE_BACKEND_AUTO = 0,
  QKVFUSE_BACKEND_REFERENCE = 1, /* scalar C reference of SPEC.md, single thread: the oracle */
  QKVFUSE_BACKEND_CPU = 2,       /* optimized CPU path */
  QKVFUSE_BACKEND_CUDA = 3,      /* CUDA kernels (tensors on a CUDA device) */
  QKVFUSE_BACKEND_COUNT          /* the number of backends above: not a valid value */
} qkvfuse_backend;

/* ------------------------------------------------------------------------- */
/* The core operator: descriptor -> plan -> run.                               */
/* ------------------------------------------------------------------------- */

#define QKVFUSE_DESC_VERSION 2

/* Static configuration of one attention layer's prologue. Start from
 * QKVFUSE_DESC_INIT so that fields added in later versions get defaults. */
typedef struct qkvfuse_desc {
  uint32_t struct_size;         /* sizeof(qkvfuse_desc) */
  uint32_t version;             /* QKVFUSE_DESC_VERSION */

  int64_t num_q_heads;          /* Nq >= 1 */
  int64_t num_kv_heads;         /* Nkv >= 1, any count (GQA, MHA or neither: no head of q reads a k head) */
  int64_t head_dim;             /* D: even, 16..1024 */
  int64_t rotary_dim;           /* R: even, 0 < R <= D (R < D: partial RoPE); 0 with QKVFUSE_ROPE_NONE */

  qkvfuse_device_type device_type; /* where the tensors of qkvfuse_run will live */
  int32_t device_id;
  qkvfuse_backend backend;      /* AUTO, or force one (QKVFUSE_ERROR_UNSUPPORTED if it cannot serve) */
  int32_t num_threads;          /* CPU backends: 0 = library default; reference ignores it */

  /* RMSNorm: y = x / sqrt(mean(x^2) + eps) * g + beta, per head, float32. */
  int32_t q_norm;               /* 1: normalize q heads with args.q_gamma [D] (args.q_beta optional) */
  int32_t k_norm;               /* 1: normalize k heads with args.k_gamma [D] (args.k_beta optional) */
  float eps;                    /* > 0 and finite; default 1e-6 */
  int32_t gamma_offset;         /* 1: use (1 + g) instead of g (Gemma-style weights) */

  /* RoPE on the first R dims of every q and k head. */
  qkvfuse_rope_source rope_source;
  qkvfuse_rope_style rope_style;
  double rope_theta;            /* QKVFUSE_ROPE_COMPUTED: base, > 1 (e.g. 10000, 500000) */
  qkvfuse_rope_scaling rope_scaling; /* QKVFUSE_ROPE_COMPUTED only */

  /* KV cache. */
  qkvfuse_cache_layout cache_layout;
  qkvfuse_quant_mode k_quant;   /* must match args.k_cache's dtype */
  qkvfuse_quant_mode v_quant;   /* must match args.v_cache's dtype */

  qkvfuse_rounding rounding;

  /* version 2 */
  qkvfuse_quant_mode q_quant;   /* NONE, or FP8_E4M3 / FP8_E5M2 (int8: INVALID_VALUE): q_out of that fp8
                                   dtype holds fp8(q / args.q_scale), q after the norm and RoPE; k_out and
                                   v_out keep the unquantized rule */
  qkvfuse_cache_addressing cache_addressing; /* SLOTS (default), or PAGE_TABLE (paged, paged_hnd, nz) */
} qkvfuse_desc;

#define QKVFUSE_DESC_INIT                                                              \
  {                                                                                    \
    sizeof(qkvfuse_desc), QKVFUSE_DESC_VERSION, 0, 0, 0, 0, QKVFUSE_DEVICE_CPU, 0,     \
        QKVFUSE_BACKEND_AUTO, 0, 0, 0, 1e-6f, 0, QKVFUSE_ROPE_NONE, QKVFUSE_ROPE_NEOX, \
        10000.0, QKVFUSE_ROPE_SCALING_INIT, QKVFUSE_CACHE_NONE, QKVFUSE_QUANT_NONE,    \
        QKVFUSE_QUANT_NONE, QKVFUSE_ROUNDING_FUSED, QKVFUSE_QUANT_NONE,                \
        QKVFUSE_ADDRESS_SLOTS                                                          \
  }

#define QKVFUSE_ARGS_VERSION 2

/* The tensors of one call. Pointers to absent optional tensors are NULL.
 * "T" is the number of tokens: qkv's leading dims flattened. Any tensor listed
 * as [T, X] may also be given with its leading dims split ([B, S, X]) or its
 * trailing dims split ([T, N, D]), as long as the split dims are collapsible. */
typedef struct qkvfuse_args {
  uint32_t struct_size;              /* sizeof(qkvfuse_args) */
  uint32_t version;                  /* QKVFUSE_ARGS_VERSION */

  /* input */
  const qkvfuse_tensor *qkv;         /* [T, H] or [B, S, H]; float32/float16/bfloat16, or int32 (dequant);
                                        row stride >= H. NULL when q, k (and v) are given (version 2) */
  const qkvfuse_tensor *weight_scale;/* [H] float32; required iff qkv is int32; finite */
  const qkvfuse_tensor *act_scale;   /* [T] float32; optional, int32 qkv only (1 when absent); finite */
  const qkvfuse_tensor *bias;        /* [H] float32/float16/bfloat16/int32; optional, int32 qkv only,
                                        added after scaling */

  /* RMSNorm */
  const qkvfuse_tensor *q_gamma;     /* [D] float32/float16/bfloat16; iff desc.q_norm */
  const qkvfuse_tensor *k_gamma;     /* [D]; iff desc.k_norm */
  const qkvfuse_tensor *q_beta;      /* [D]; optional, desc.q_norm only */
  const qkvfuse_tensor *k_beta;      /* [D]; optional, desc.k_norm only */

  /* RoPE */
  const qkvfuse_tensor *positions;   /* [T] int32/int64; COS_SIN_CACHE: in [0, max_pos); COMPUTED: in [0, 2^31) */
  const qkvfuse_tensor *cos_sin_cache; /* [max_pos, R] float32/float16/bfloat16; row p = [cos_0..cos_{R/2-1} |
                                          sin_0..sin_{R/2-1}] */
  const qkvfuse_tensor *cos;         /* [T, R] float32/float16/bfloat16, full length, used as given */
  const qkvfuse_tensor *sin;         /* [T, R], same dtype as cos */

  /* cache */
  const qkvfuse_tensor *slot_mapping;/* [T] int32/int64 (paged, paged_hnd, nz) or [B] (contiguous); -1 skips;
                                        NULL with page-table addressing (the page table below) */
  const qkvfuse_tensor *k_scale;     /* float32, [1], [Nkv] or [Nkv, D]; iff desc.k_quant != NONE; nonzero,
                                        finite */
  const qkvfuse_tensor *v_scale;     /* float32, [1], [Nkv] or [Nkv, D]; iff desc.v_quant != NONE */
  const qkvfuse_tensor *k_offset;    /* float32, k_scale's element count; iff desc.k_quant == INT8_ASYM; finite */
  const qkvfuse_tensor *v_offset;    /* float32, v_scale's element count; iff desc.v_quant == INT8_ASYM */

  /* outputs */
  const qkvfuse_tensor *q_out;       /* [T, Nq*D]; required. dtype: qkv's or float32 for float qkv; for
                                        int32 qkv float32 or the cos/sin (cos_sin_cache) dtype, any float
                                        dtype when RoPE has no table; with desc.q_quant the fp8 dtype of
                                        that mode, holding fp8(q / q_scale). May be exactly the q columns
                                        of qkv (in place: same data pointer, row stride and dtype) */
  const qkvfuse_tensor *k_out;       /* [T, Nkv*D] k after RoPE, before quantization; optional; dtype as
                                        q_out's rule. May be exactly the k columns of qkv (in place) */
  const qkvfuse_tensor *v_out;       /* [T, Nkv*D] v, before quantization; optional; dtype as q_out's rule;
                                        never in place */
  const qkvfuse_tensor *k_cache;     /* layout of desc.cache_layout; iff desc.cache_layout != NONE */
  const qkvfuse_tensor *v_cache;     /* same layout, blocks and block_size as k_cache; dtype per desc.v_quant */

  /* data-dependent error report (optional): a uint32 on the tensors' device that
   * the run ORs QKVFUSE_DATA_ERROR_* bits into, one for each class of data
   * error present. It is an output of the call: it may not overlap any tensor
   * of the call (QKVFUSE_ERROR_OVERLAP). On the CPU a data error is also
   * returned as a status (the first class found) before anything is written;
   * on CUDA it is only recorded here (the offending token's outputs and cache
   * rows are not written, nothing is read out of bounds) and read by the
   * caller after the stream synchronizes. */
  uint32_t *error_flags;

  /* version 2 */

  /* Separate inputs, the alternative to one packed qkv: q [T, Nq*D], k [T, Nkv*D] and
   * v [T, Nkv*D] (or their [B, S, X] / [T, N, D] forms), one dtype, each with its own
   * row stride; any may be a view into a packed tensor. Give qkv, or q and k (and v),
   * never both. v may be NULL when nothing reads it (no v_out, no v_cache). T (and B,
   * S) come from q. weight_scale and bias index the columns of [q | k | v] as for qkv.
   * In place: q_out may be exactly q, k_out exactly k (same data, strides, dtype). */
  const qkvfuse_tensor *q;
  const qkvfuse_tensor *k;
  const qkvfuse_tensor *v;
  const qkvfuse_tensor *q_scale;     /* float32 [1] (or 0-dim); iff desc.q_quant != NONE; nonzero, finite */

  /* Page-table addressing (desc.cache_addressing = PAGE_TABLE), instead of slot_mapping;
   * all int32/int64 vectors. */
  const qkvfuse_tensor *kv_indptr;     /* [batch + 1], non-decreasing, kv_indptr[0] >= 0 */
  const qkvfuse_tensor *kv_indices;    /* [>= kv_indptr[batch]]: block numbers, in [0, blocks) */
  const qkvfuse_tensor *batch_indices; /* [T]: the token's sequence in [0, batch), or -1 (skip: its
                                          kv_positions entry is not read) */
  const qkvfuse_tensor *kv_positions;  /* [T]: its position in the sequence, >= 0 and inside the sequence's
                                          blocks (p / block_size < kv_indptr[b + 1] - kv_indptr[b]) */
} qkvfuse_args;

#define QKVFUSE_ARGS_INIT                                                                         \
  {                                                                                               \
    sizeof(qkvfuse_args), QKVFUSE_ARGS_VERSION, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, \
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,     \
        NULL, NULL, NULL, NULL, NULL, NULL, NULL                                                  \
  }

#define QKVFUSE_DATA_ERROR_POSITION 1u /* a position outside [0, max_pos) (or negative, COMPUTED) */
#define QKVFUSE_DATA_ERROR_SLOT 2u     /* a slot or contiguous index outside the cache, or page-table entries
                                          that put a token outside it */
#define QKVFUSE_DATA_ERROR_SCALE 4u    /* a non-finite scale or offset, or a zero k_scale / v_scale / q_scale
                                          (the dequant scales multiply: zero is allowed there) */

typedef struct qkvfuse_plan qkvfuse_plan;

/**
 * Validate a descriptor and choose the backend.
 * @param desc  the configuration; read only during the call.
 * @param plan  out: a new plan, to be released with qkvfuse_plan_destroy.
 * @return QKVFUSE_SUCCESS, or the status of the first bad field (message names it).
 */
QKVFUSE_API qkvfuse_status qkvfuse_plan_create(const qkvfuse_desc *desc, qkvfuse_plan **plan);

/** Release a plan; NULL is accepted and does nothing. */
QKVFUSE_API void qkvfuse_plan_destroy(qkvfuse_plan *plan);

/** @return a static name of the backend the plan runs on ("reference", "cpu-avx512",
 *  "cuda", ...), or "?" for NULL. */
QKVFUSE_API const char *qkvfuse_plan_backend_name(const qkvfuse_plan *plan);

/**
 * Run the fused chain once.
 * @param plan    from qkvfuse_plan_create.
 * @param args    the tensors; validated against the plan before anything is written.
 * @param stream  CUDA plans: the cudaStream_t to enqueue on (NULL = legacy default
 *                stream); CPU plans: ignored. No allocation and no host
 *                synchronization happen inside, so the call can be captured in a CUDA graph.
 * @return QKVFUSE_SUCCESS, or an error status (nothing written).
 */
QKVFUSE_API qkvfuse_status qkvfuse_run(const qkvfuse_plan *plan, const qkvfuse_args *args, void *stream);

/* ------------------------------------------------------------------------- */
/* The three named operators: the seeds' own arguments, one call each.        */
/* They build the equivalent descriptor, validate, and run on the device of    */
/* their tensors with the default backend; they allocate nothing (but strict's */
/* index check, below). Each has an _ex form taking qkvfuse_named_options.     */
/* ------------------------------------------------------------------------- */

/* Options of the named operators' _ex forms; NULL means QKVFUSE_NAMED_OPTIONS_INIT.
 * Start from that initializer: struct_size tells the library which fields a
 * caller filled (fields are only ever appended). */
typedef struct qkvfuse_named_options {
  uint32_t struct_size;      /* sizeof(qkvfuse_named_options) */
  qkvfuse_rounding rounding; /* the descriptor's rounding (FUSED by default). Bit-identical to a seed:
                                split_qkv_rmsnorm_rope: ASCEND_TRITON (its Triton kernel) or UNFUSED_PARITY
                                (its PyTorch composition); qkv_rmsnorm_rope_cache and
                                dequant_rope_quant_kvcache: CANN */
  int32_t strict;            /* 1: also enforce the constraints the seed states for its operator
                                (docs/API.md, "strict"), each failure a status and a message citing the
                                constraint; 0: accept everything the library can compute. The checks that
                                read index data (duplicates, -1) run on CPU tensors only: a call never
                                copies device memory to the host */
} qkvfuse_named_options;

#define QKVFUSE_NAMED_OPTIONS_INIT { sizeof(qkvfuse_named_options), QKVFUSE_ROUNDING_FUSED, 0 }

/**
 * vllm-ascend split_qkv_rmsnorm_rope: float input, RMSNorm on q and k (optional
 * beta), RoPE from cos_sin_cache + positions, outputs q, k and v (v copied).
 *
 * @param input          [T, q_hidden_size + 2*kv_hidden_size] float32/float16/bfloat16
 * @param q_weight       [head_dim] RMSNorm gamma of q
 * @param k_weight       [head_dim] RMSNorm gamma of k
 * @param q_hidden_size  Nq * head_dim
 * @param kv_hidden_size Nkv * head_dim
 * @param head_dim       D
 * @param eps            RMSNorm epsilon (rounds to a positive finite float32)
 * @param cos_sin_cache  [max_pos, rope_dim]
 * @param positions      [T] int32/int64
 * @param rope_dim       R; 0 means head_dim (the seed's None)
 * @param q_bias         [head_dim] beta of q, or NULL
 * @param k_bias         [head_dim] beta of k, or NULL (given iff q_bias is)
 * @param is_neox        1: neox pairs (the seed's only mode); 0: interleaved pairs
 * @param q_out          [T, q_hidden_size], dtype of input (or float32)
 * @param k_out          [T, kv_hidden_size]
 * @param v_out          [T, kv_hidden_size]
 * @param error_flags    optional, see qkvfuse_args.error_flags
 * @param stream         CUDA stream or NULL
 */
QKVFUSE_API qkvfuse_status qkvfuse_split_qkv_rmsnorm_rope(
    const qkvfuse_tensor *input, const qkvfuse_tensor *q_weight, const qkvfuse_tensor *k_weight,
    int64_t q_hidden_size, int64_t kv_hidden_size, int64_t head_dim, double eps,
    const qkvfuse_tensor *cos_sin_cache, const qkvfuse_tensor *positions, int64_t rope_dim,
    const qkvfuse_tensor *q_bias, const qkvfuse_tensor *k_bias, int is_neox,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out,
    uint32_t *error_flags, void *stream);

/** qkvfuse_split_qkv_rmsnorm_rope with options (NULL: defaults). strict enforces seed 000's kernel:
 *  is_neox = 1; input, cos_sin_cache and the outputs bfloat16; input, outputs and cos_sin_cache with
 *  contiguous rows. */
QKVFUSE_API qkvfuse_status qkvfuse_split_qkv_rmsnorm_rope_ex(
    const qkvfuse_tensor *input, const qkvfuse_tensor *q_weight, const qkvfuse_tensor *k_weight,
    int64_t q_hidden_size, int64_t kv_hidden_size, int64_t head_dim, double eps,
    const qkvfuse_tensor *cos_sin_cache, const qkvfuse_tensor *positions, int64_t rope_dim,
    const qkvfuse_tensor *q_bias, const qkvfuse_tensor *k_bias, int is_neox,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out,
    const qkvfuse_named_options *options, uint32_t *error_flags, void *stream);

/**
 * CANN QkvRmsNormRopeCache: RMSNorm, RoPE from per-token cos/sin (neox), k and v
 * quantized (none / int8 symmetric / int8 asymmetric, per-channel [N, D] scales)
 * and scattered by index into the caches (-1 skips).
 *
 * @param qkv        [B*S, (Nq+Nk+Nv)*D] float16/bfloat16 (float32 accepted)
 * @param q_gamma    [D]
 * @param k_gamma    [D]
 * @param cos        [B*S, D] (or [B*S, 1, D]), same dtype family as qkv
 * @param sin        like cos
 * @param index      [B*S] int64 (int32 accepted): slot of each token, -1 skips
 * @param q_out      [B*S, Nq*D]
 * @param k_cache    cache_mode layout; int8 when k is quantized, else qkv's dtype
 * @param v_cache    like k_cache
 * @param k_scale    [Nk, D] float32 iff k_cache is int8, else NULL
 * @param v_scale    [Nv, D] float32 iff v_cache is int8, else NULL
 * @param k_offset   [Nk, D] float32 for asymmetric k quantization, else NULL
 * @param v_offset   [Nv, D] float32 for asymmetric v quantization, else NULL
 * @param q_out_before_quant  [B*S, Nq*D] or NULL: q written a second time (q is never quantized)
 * @param k_out_before_quant  [B*S, Nk*D] or NULL: k after RoPE, before quantization
 * @param v_out_before_quant  [B*S, Nv*D] or NULL: v before quantization
 * @param qkv_size   {B, S, N, D}: N = Nq + Nk + Nv
 * @param head_nums  {Nq, Nk, Nv}: Nk = Nv
 * @param epsilon    RMSNorm epsilon (rounds to a positive finite float32); the seed's default is 1e-6
 * @param cache_mode "PA_NZ" (the seed's only mode; NULL means it), "PA_BNSD" (paged_hnd), "PA"
 *                   or "PA_BSND" (paged)
 * @param is_output_qkv  1: write the *_before_quant outputs (which must then be given)
 */
QKVFUSE_API qkvfuse_status qkvfuse_qkv_rmsnorm_rope_cache(
    const qkvfuse_tensor *qkv, const qkvfuse_tensor *q_gamma, const qkvfuse_tensor *k_gamma,
    const qkvfuse_tensor *cos, const qkvfuse_tensor *sin, const qkvfuse_tensor *index,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_cache, const qkvfuse_tensor *v_cache,
    const qkvfuse_tensor *k_scale, const qkvfuse_tensor *v_scale, const qkvfuse_tensor *k_offset,
    const qkvfuse_tensor *v_offset, const qkvfuse_tensor *q_out_before_quant,
    const qkvfuse_tensor *k_out_before_quant, const qkvfuse_tensor *v_out_before_quant,
    const int64_t qkv_size[4], const int64_t head_nums[3], double epsilon, const char *cache_mode,
    int is_output_qkv, uint32_t *error_flags, void *stream);

/** qkvfuse_qkv_rmsnorm_rope_cache with options (NULL: defaults). strict enforces seed 001: qkv float16
 *  or bfloat16; q_gamma, k_gamma, cos, q_out and the *_before_quant outputs of qkv's dtype; D = 128;
 *  cache_mode PA_NZ; each cache of qkv's dtype or int8, block_size a multiple of 32 bytes of it,
 *  BlockNum >= ceil(S / block_size) * B; scales and offsets [Nk, D]; index int64 without repeated
 *  values (-1 excepted). */
QKVFUSE_API qkvfuse_status qkvfuse_qkv_rmsnorm_rope_cache_ex(
    const qkvfuse_tensor *qkv, const qkvfuse_tensor *q_gamma, const qkvfuse_tensor *k_gamma,
    const qkvfuse_tensor *cos, const qkvfuse_tensor *sin, const qkvfuse_tensor *index,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_cache, const qkvfuse_tensor *v_cache,
    const qkvfuse_tensor *k_scale, const qkvfuse_tensor *v_scale, const qkvfuse_tensor *k_offset,
    const qkvfuse_tensor *v_offset, const qkvfuse_tensor *q_out_before_quant,
    const qkvfuse_tensor *k_out_before_quant, const qkvfuse_tensor *v_out_before_quant,
    const int64_t qkv_size[4], const int64_t head_nums[3], double epsilon, const char *cache_mode,
    int is_output_qkv, const qkvfuse_named_options *options, uint32_t *error_flags, void *stream);

/**
 * CANN DequantRopeQuantKvcache: optional int32 dequant, split by size_splits,
 * RoPE from per-token cos/sin (neox, no RMSNorm), int8 quantization of k and v
 * (symmetric, or asymmetric when offsets are given), write to the caches.
 * D up to 1024. The seed takes non-contiguous inputs: strided indices,
 * scales, offsets and dequant vectors run on the CPU (not on CUDA); x, cos,
 * sin and the caches need a last-dim stride of 1 here (the core API's
 * reference backend takes any: Conventions).
 *
 * @param x              [B, S, H] or [B, H]; float16/bfloat16/float32, or int32 (dequant)
 * @param cos            [B, S, 1, D] or [B, D] (R = D); float16/bfloat16/float32
 * @param sin            like cos
 * @param k_cache        [C1, C2, Nkv, D] int8 (cache_mode "contiguous": [batch, max_seq, Nkv, D];
 *                       "page": [blocks, block_size, Nkv, D])
 * @param v_cache        like k_cache
 * @param indices        int32/int64; "contiguous": [B] start position per batch; "page": [B*S] slots;
 *                       -1 skips
 * @param scale_k        [Nkv, D] or [Nkv*D] float32
 * @param scale_v        like scale_k
 * @param offset_k       like scale_k, or NULL (symmetric)
 * @param offset_v       like scale_k, or NULL
 * @param weight_scale   [H] float32; required when x is int32; with float x ignored (not read or
 *                       checked: the seed says it has no effect), so it may be given or NULL
 * @param activation_scale [B*S] float32 or NULL; with float x ignored, as weight_scale
 * @param bias           [H] float32/float16/bfloat16/int32 or NULL; with float x ignored, as weight_scale
 * @param size_splits    {Nq*D, Nkv*D, Nkv*D}
 * @param quant_mode     "static" (NULL means it)
 * @param layout         "BSND" (NULL means it)
 * @param kv_output      1: write k_out and v_out (which must then be given)
 * @param cache_mode     "contiguous" (NULL means it) or "page"
 * @param q_out          [B, S, Nq, D] or [B, Nq, D] (any collapsible view of [T, Nq*D]); dtype of cos
 * @param k_out          [T, Nkv*D]; when kv_output is 0 ignored (not read, checked or written), so
 *                       NULL or the seed's zero-element kOut
 * @param v_out          [T, Nkv*D]; when kv_output is 0 ignored, as k_out
 */
QKVFUSE_API qkvfuse_status qkvfuse_dequant_rope_quant_kvcache(
    const qkvfuse_tensor *x, const qkvfuse_tensor *cos, const qkvfuse_tensor *sin,
    const qkvfuse_tensor *k_cache, const qkvfuse_tensor *v_cache, const qkvfuse_tensor *indices,
    const qkvfuse_tensor *scale_k, const qkvfuse_tensor *scale_v, const qkvfuse_tensor *offset_k,
    const qkvfuse_tensor *offset_v, const qkvfuse_tensor *weight_scale,
    const qkvfuse_tensor *activation_scale, const qkvfuse_tensor *bias, const int64_t size_splits[3],
    const char *quant_mode, const char *layout, int kv_output, const char *cache_mode,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out,
    uint32_t *error_flags, void *stream);

/** qkvfuse_dequant_rope_quant_kvcache with options (NULL: defaults). strict enforces seed 003: x
 *  float16, bfloat16 or int32 with H <= 4096 and a multiple of 64; D a multiple of 16; cos (and sin)
 *  float16 or bfloat16, of x's dtype for float x, [B, S, 1, D] for 3-dim x and [B, D] for 2-dim x;
 *  the outputs of cos's dtype; int8 caches; indices int32, >= 0 (no -1), without repeated values in
 *  page mode; scales and offsets of Nkv*D elements. */
QKVFUSE_API qkvfuse_status qkvfuse_dequant_rope_quant_kvcache_ex(
    const qkvfuse_tensor *x, const qkvfuse_tensor *cos, const qkvfuse_tensor *sin,
    const qkvfuse_tensor *k_cache, const qkvfuse_tensor *v_cache, const qkvfuse_tensor *indices,
    const qkvfuse_tensor *scale_k, const qkvfuse_tensor *scale_v, const qkvfuse_tensor *offset_k,
    const qkvfuse_tensor *offset_v, const qkvfuse_tensor *weight_scale,
    const qkvfuse_tensor *activation_scale, const qkvfuse_tensor *bias, const int64_t size_splits[3],
    const char *quant_mode, const char *layout, int kv_output, const char *cache_mode,
    const qkvfuse_tensor *q_out, const qkvfuse_tensor *k_out, const qkvfuse_tensor *v_out,
    const qkvfuse_named_options *options, uint32_t *error_flags, void *stream);

/* ------------------------------------------------------------------------- */
/* cos/sin cache builder.                                                       */
/* ------------------------------------------------------------------------- */

/**
 * Fill cos_sin_cache [max_pos, R] (float32/float16/bfloat16, CPU memory) with
 * row p = [cos(p*f_0)..cos(p*f_{R/2-1}) | sin(p*f_0)..sin(p*f_{R/2-1})] * mscale,
 * where f_i are theta's inverse frequencies after the scaling rule. Angles are
 * reduced in double precision, so rows stay accurate far beyond 2^24.
 * R is the tensor's shape[1] (even, 2..1024); max_pos its shape[0].
 * @return QKVFUSE_SUCCESS, or the status naming the bad argument.
 */
QKVFUSE_API qkvfuse_status qkvfuse_build_cos_sin_cache(double theta, const qkvfuse_rope_scaling *scaling,
                                                       const qkvfuse_tensor *cos_sin_cache);

/**
 * The inverse frequencies f_i (i < rotary_dim/2) and the cos/sin multiplier
 * (mscale; 1 except for YaRN) that a rule yields, in double precision.
 * rotary_dim: even, 2..1024. scaling may be NULL (no scaling), here and in
 * qkvfuse_build_cos_sin_cache.
 * @param inv_freq out: rotary_dim/2 values.
 * @param mscale   out (may be NULL).
 */
QKVFUSE_API qkvfuse_status qkvfuse_rope_inv_freq(double theta, const qkvfuse_rope_scaling *scaling,
                                                 int64_t rotary_dim, double *inv_freq, double *mscale);

#ifdef __cplusplus
}
#endif

#endif /* QKVFUSE_H */
