/* SPDX-License-Identifier: Apache-2.0 */
/* Case buffers: views with the spec's strides, inputs filled from the seed,
 * outputs and caches filled with a non-zero poison. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "case.h"
#include "fp.h"
#include "tview.h"

#define F32 QKVFUSE_DTYPE_FLOAT32

void tk_fill_poison(tk_rng *r, uint8_t *p, size_t n) {
  uint64_t x = 0;
  for (size_t i = 0; i < n; i++) {
    if (i % 8 == 0) x = tk_rng_next(r);
    uint8_t b = (uint8_t)(x >> (8 * (i % 8)));
    p[i] = b ? b : 0x5A;
  }
}

static int64_t extent(const qkvfuse_tensor *t) {
  int64_t e = 1;
  for (int i = 0; i < t->ndim; i++) {
    if (t->shape[i] == 0) return 0;
    e += (t->shape[i] - 1) * t->strides[i];
  }
  return e;
}

/* Make view `slot` in buffer `buf` at element offset `off`, growing the buffer. */
static void put_view(tk_case *c, int slot, int buf, int64_t off, qkvfuse_dtype dt, int ndim, const int64_t *shape,
                     const int64_t *strides) {
  tk_view *v = &c->view[slot];
  v->present = 1;
  v->buf = buf;
  v->off = off;
  memset(&v->t, 0, sizeof v->t);
  v->t.dtype = dt;
  v->t.device_type = QKVFUSE_DEVICE_CPU;
  v->t.ndim = ndim;
  for (int i = 0; i < ndim; i++) v->t.shape[i] = shape[i], v->t.strides[i] = strides[i];
  size_t need = (size_t)(off + extent(&v->t)) * tk_size(dt);
  if (need < 64) need = 64; /* never a NULL data pointer, even with 0 elements */
  if (need > c->buf[buf].bytes) c->buf[buf].bytes = need;
}

/* The element stride of slot's view: 1, or strided (tk_spec.strided) 2 for
 * rows and caches and 2 or 3 for vectors (odd and even, by slot). */
static int64_t stride_of(const tk_case *c, int slot) {
  if (!((c->sp.strided >> slot) & 1)) return 1;
  return tk_slot_is_vector(slot) ? 2 + slot % 2 : 2;
}

/* A vector [n], contiguous or strided. */
static void put_vec(tk_case *c, int slot, qkvfuse_dtype dt, int64_t n) {
  int64_t e = stride_of(c, slot);
  put_view(c, slot, slot, 0, dt, 1, &n, &e);
}

/* A [T, X] tensor as the spec shapes it: [T, X] / [B, S, X], heads split
 * ([.., N, D]) when split, row stride ld, element stride e. */
static void put_rows(tk_case *c, int slot, int buf, int64_t off, qkvfuse_dtype dt, int64_t X, int64_t ld, int split,
                     int64_t N, int64_t e) {
  const tk_spec *s = &c->sp;
  int64_t shape[6], st[6];
  int n = 0;
  if (s->in3d == 1) {
    shape[n] = s->B, st[n++] = s->S * ld;
    shape[n] = s->S, st[n++] = ld;
  } else {
    shape[n] = s->T, st[n++] = ld;
  }
  if (split && N > 0) {
    shape[n] = N, st[n++] = X / N * e;
    shape[n] = X / N, st[n++] = e;
  } else {
    shape[n] = X, st[n++] = e;
  }
  put_view(c, slot, buf, off, dt, n, shape, st);
}

/* Cache views: the three outer dims laid out in memory order `perm`, each
 * stride padded by cache_pad; interleaved: k and v alternate in the
 * outermost memory dim (a [.., 2, ..] buffer, k = [:,0], v = [:,1]). */
static void put_caches(tk_case *c) {
  const tk_spec *s = &c->sp;
  static const int perms[6][3] = {{0, 1, 2}, {1, 0, 2}, {0, 2, 1}, {2, 0, 1}, {1, 2, 0}, {2, 1, 0}};
  int64_t KV = s->Nkv * s->D;
  /* k and v sharing a buffer share the element stride */
  const int64_t e_k = stride_of(c, TK_K_CACHE), e_v = stride_of(c, TK_V_CACHE), e_kv = e_k > e_v ? e_k : e_v;
  for (int w = 0; w < 2; w++) {
    qkvfuse_dtype dt = w ? s->v_cache_dt : s->k_cache_dt;
    int64_t shape[4];
    switch (s->layout) {
      case QKVFUSE_CACHE_PAGED: shape[0] = s->blocks, shape[1] = s->block_size, shape[2] = s->Nkv, shape[3] = s->D; break;
      case QKVFUSE_CACHE_PAGED_HND: shape[0] = s->blocks, shape[1] = s->Nkv, shape[2] = s->block_size, shape[3] = s->D; break;
      case QKVFUSE_CACHE_NZ: {
        int64_t cc = 32 / (int64_t)tk_size(dt);
        shape[0] = s->blocks, shape[1] = KV / cc, shape[2] = s->block_size, shape[3] = cc;
        break;
      }
      default: shape[0] = s->cache_batch, shape[1] = s->max_seq, shape[2] = s->Nkv, shape[3] = s->D; break;
    }
    const int *order = perms[s->cache_perm % 6]; /* outermost first */
    const int64_t e = s->kv_interleaved ? e_kv : w ? e_v : e_k;
    int64_t st[4], run = shape[3] * e + s->cache_pad;
    st[3] = e;
    for (int i = 2; i >= 1; i--) {
      st[order[i]] = run;
      run = run * shape[order[i]] + s->cache_pad;
    }
    int64_t unit = run;
    st[order[0]] = s->kv_interleaved ? 2 * unit + s->cache_pad : unit + s->cache_pad;
    int slot = w ? TK_V_CACHE : TK_K_CACHE;
    int buf = (w && s->kv_interleaved) ? TK_K_CACHE : slot;
    put_view(c, slot, buf, (w && s->kv_interleaved) ? unit : 0, dt, 4, shape, st);
  }
}

/* A scale or offset of kind 0..4 (tk_spec.k_scale_kind); strided, [Nkv, D]
 * also has 3 elements of padding per row. */
static void put_scale(tk_case *c, int slot, int kind) {
  const tk_spec *s = &c->sp;
  const int64_t e = stride_of(c, slot);
  int64_t shape[2] = {s->Nkv, s->D}, st[2] = {e > 1 ? s->D * e + 3 : s->D, e}, one = 1, flat = s->Nkv * s->D;
  switch (kind) {
    case 1: put_view(c, slot, slot, 0, F32, 0, shape, st); break;
    case 2: put_view(c, slot, slot, 0, F32, 2, shape, st); break;
    case 3: put_view(c, slot, slot, 0, F32, 1, &flat, &e); break;
    case 4: put_view(c, slot, slot, 0, F32, 1, shape, &e); break; /* [Nkv]: per kv head */
    default: put_view(c, slot, slot, 0, F32, 1, &one, &e); break;
  }
}

/* The input: one qkv view, or q, k (and v) views of one packed buffer or of
 * three buffers; the [T, N, D] form with out_split_heads. in_ld gets each
 * part's row stride. */
static void put_inputs(tk_case *c, int64_t in_ld[3], int64_t e) {
  const tk_spec *s = &c->sp;
  const int64_t H = (s->Nq + 2 * s->Nkv) * s->D, QD = s->Nq * s->D, KV = s->Nkv * s->D;
  if (!s->split_inputs) {
    put_rows(c, TK_QKV, TK_QKV, 0, s->qkv_dt, H, (H + s->qkv_pad) * e, 0, 0, e);
    in_ld[0] = in_ld[1] = in_ld[2] = (H + s->qkv_pad) * e;
    return;
  }
  const int slots[3] = {TK_Q, TK_K, TK_V};
  const int64_t width[3] = {QD, KV, KV}, heads[3] = {s->Nq, s->Nkv, s->Nkv}, first[3] = {0, QD, QD + KV};
  for (int i = 0; i < 3; i++) {
    if (i == 2 && s->split_inputs == 3) break;
    const int packed = s->split_inputs == 1;
    in_ld[i] = (packed ? H + s->qkv_pad : width[i] + (s->qkv_pad * (i + 1)) % 48) * e; /* strides differ per part */
    put_rows(c, slots[i], packed ? TK_QKV : slots[i], packed ? first[i] * e : 0, s->qkv_dt, width[i], in_ld[i],
             s->out_split_heads, heads[i], e);
  }
}

/* The view of input column c (of [q | k | v]) of token t, and its logical
 * index in that view. */
static int input_slot(const tk_case *c, int64_t t, int64_t col, int64_t *i) {
  const tk_spec *s = &c->sp;
  const int64_t H = (s->Nq + 2 * s->Nkv) * s->D, QD = s->Nq * s->D, KV = s->Nkv * s->D;
  if (!s->split_inputs) {
    *i = t * H + col;
    return TK_QKV;
  }
  const int part = col < QD ? 0 : (col < QD + KV ? 1 : 2);
  const int64_t w = part ? KV : QD, c0 = part == 0 ? 0 : (part == 1 ? QD : QD + KV);
  *i = t * w + (col - c0);
  return part == 0 ? TK_Q : (part == 1 ? TK_K : TK_V);
}

static void layout_views(tk_case *c) {
  const tk_spec *s = &c->sp;
  int64_t H = (s->Nq + 2 * s->Nkv) * s->D, QD = s->Nq * s->D, KV = s->Nkv * s->D, in_ld[3];
  /* the input's parts (and the outputs in place on them) share one element stride */
  const uint64_t in_bits = (1ull << TK_QKV) | (1ull << TK_Q) | (1ull << TK_K) | (1ull << TK_V);
  const int64_t e_in = s->strided & in_bits ? 2 : 1;
  put_inputs(c, in_ld, e_in);
  if (s->qkv_dt == QKVFUSE_DTYPE_INT32) {
    put_vec(c, TK_WEIGHT_SCALE, F32, H);
    if (s->act_scale) put_vec(c, TK_ACT_SCALE, F32, s->T);
    if (s->bias_dt) put_vec(c, TK_BIAS, s->bias_dt, H);
  }
  if (s->q_norm) put_vec(c, TK_Q_GAMMA, s->q_gamma_dt, s->D);
  if (s->k_norm) put_vec(c, TK_K_GAMMA, s->k_gamma_dt, s->D);
  if (s->q_norm && s->q_beta_dt) put_vec(c, TK_Q_BETA, s->q_beta_dt, s->D);
  if (s->k_norm && s->k_beta_dt) put_vec(c, TK_K_BETA, s->k_beta_dt, s->D);
  if (s->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE || s->rope_source == QKVFUSE_ROPE_COMPUTED)
    put_vec(c, TK_POSITIONS, s->pos_dt, s->T);
  if (s->rope_source == QKVFUSE_ROPE_COS_SIN_CACHE) {
    const int64_t e = stride_of(c, TK_COS_SIN_CACHE);
    int64_t shape[2] = {s->max_pos, s->R}, st[2] = {(s->R + s->rope_pad) * e, e};
    put_view(c, TK_COS_SIN_CACHE, TK_COS_SIN_CACHE, 0, s->rope_dt, 2, shape, st);
  }
  if (s->rope_source == QKVFUSE_ROPE_COS_SIN) {
    /* [T, R], or [T, 1, R] / [B, S, 1, R] (CANN) when heads are split */
    const int64_t ec = stride_of(c, TK_COS), es = stride_of(c, TK_SIN);
    put_rows(c, TK_COS, TK_COS, 0, s->rope_dt, s->R, (s->R + s->rope_pad) * ec, s->out_split_heads, 1, ec);
    put_rows(c, TK_SIN, TK_SIN, 0, s->rope_dt, s->R, (s->R + s->rope_pad) * es, s->out_split_heads, 1, es);
  }
  if (s->layout != QKVFUSE_CACHE_NONE) {
    if (s->addressing == QKVFUSE_ADDRESS_PAGE_TABLE) {
      put_vec(c, TK_KV_INDPTR, s->pt_dt[0], s->pt_batch + 1);
      put_vec(c, TK_KV_INDICES, s->pt_dt[1], s->pt_lead + tk_pt_pages(s) + s->pt_tail);
      put_vec(c, TK_BATCH_INDICES, s->pt_dt[2], s->T);
      put_vec(c, TK_KV_POSITIONS, s->pt_dt[3], s->T);
    } else {
      put_vec(c, TK_SLOT_MAPPING, s->slot_dt, s->layout == QKVFUSE_CACHE_CONTIGUOUS ? s->B : s->T);
    }
    if (s->k_quant) put_scale(c, TK_K_SCALE, s->k_scale_kind);
    if (s->v_quant) put_scale(c, TK_V_SCALE, s->v_scale_kind);
    if (s->k_quant == QKVFUSE_QUANT_INT8_ASYM) put_scale(c, TK_K_OFFSET, s->k_scale_kind);
    if (s->v_quant == QKVFUSE_QUANT_INT8_ASYM) put_scale(c, TK_V_OFFSET, s->v_scale_kind);
    put_caches(c);
  }
  if (s->q_quant) put_scale(c, TK_Q_SCALE, s->q_scale_kind & 1);
  const int q_buf = s->split_inputs >= 2 ? TK_Q : TK_QKV, k_buf = s->split_inputs >= 2 ? TK_K : TK_QKV;
  const int64_t k_off = s->split_inputs >= 2 ? 0 : QD * e_in;
  const int64_t eq = stride_of(c, TK_Q_OUT), ek = stride_of(c, TK_K_OUT), ev = stride_of(c, TK_V_OUT);
  if (s->in_place_q) put_rows(c, TK_Q_OUT, q_buf, 0, s->qkv_dt, QD, in_ld[0], s->out_split_heads, s->Nq, e_in);
  else put_rows(c, TK_Q_OUT, TK_Q_OUT, 0, s->q_out_dt, QD, (QD + s->out_pad) * eq, s->out_split_heads, s->Nq, eq);
  if (s->k_out_dt && s->in_place_k)
    put_rows(c, TK_K_OUT, k_buf, k_off, s->qkv_dt, KV, in_ld[1], s->out_split_heads, s->Nkv, e_in);
  else if (s->k_out_dt)
    put_rows(c, TK_K_OUT, TK_K_OUT, 0, s->k_out_dt, KV, (KV + s->out_pad) * ek, s->out_split_heads, s->Nkv, ek);
  if (s->v_out_dt)
    put_rows(c, TK_V_OUT, TK_V_OUT, 0, s->v_out_dt, KV, (KV + s->out_pad) * ev, s->out_split_heads, s->Nkv, ev);
}

int tk_slot_is_vector(int slot) {
  switch (slot) {
    case TK_QKV: case TK_Q: case TK_K: case TK_V: case TK_COS_SIN_CACHE: case TK_COS: case TK_SIN:
    case TK_Q_OUT: case TK_K_OUT: case TK_V_OUT: case TK_K_CACHE: case TK_V_CACHE:
      return 0;
    default:
      return slot >= 0 && slot < TK_NSLOT;
  }
}

/* 1 if view t's elements are not row-major contiguous (dims of one element aside). */
static int view_strided(const qkvfuse_tensor *t) {
  int64_t expect = 1;
  for (int j = t->ndim - 1; j >= 0; j--) {
    if (t->shape[j] != 1 && t->strides[j] != expect) return 1;
    expect *= t->shape[j];
  }
  return 0;
}

uint64_t tk_spec_present(const tk_spec *s) {
  tk_case c; /* views only: nothing allocated */
  memset(&c, 0, sizeof c);
  c.sp = *s;
  layout_views(&c);
  uint64_t m = 0;
  for (int slot = 0; slot < TK_NSLOT; slot++)
    if (c.view[slot].present) m |= 1ull << slot;
  return m;
}

void tk_spec_fit_gather(tk_spec *s) {
  while (tk_spec_gather_bytes(s) > TK_GATHER_BYTES) {
    int best = -1;
    int64_t least = INT64_MAX;
    for (int slot = 0; slot < TK_NSLOT; slot++) {
      if (!(s->strided >> slot & 1) || !tk_slot_is_vector(slot)) continue;
      tk_spec t = *s;
      t.strided &= ~(1ull << slot);
      const int64_t b = tk_spec_gather_bytes(&t);
      if (b < least) least = b, best = slot;
    }
    s->strided &= ~(1ull << best);
  }
}

int64_t tk_spec_gather_bytes(const tk_spec *s) {
  tk_case c;
  memset(&c, 0, sizeof c);
  c.sp = *s;
  layout_views(&c);
  int64_t bytes = 0;
  for (int slot = 0; slot < TK_NSLOT; slot++) {
    const qkvfuse_tensor *t = &c.view[slot].t;
    if (c.view[slot].present && tk_slot_is_vector(slot) && view_strided(t))
      bytes += (tk_numel(t) * (int64_t)tk_size(t->dtype) + 63) / 64 * 64;
  }
  return bytes;
}

static void set(const tk_case *c, int slot, int64_t i, double v) {
  const tk_view *w = &c->view[slot];
  size_t es = tk_size(w->t.dtype);
  tk_encode(w->t.dtype, c->buf[w->buf].init + (w->off + tk_elem_offset(&w->t, i)) * (int64_t)es, v);
}

/* Element i = t*H + col of the logical [T, H] input. */
static void set_input(const tk_case *c, int64_t i, double v) {
  const int64_t H = (c->sp.Nq + 2 * c->sp.Nkv) * c->sp.D;
  int64_t j;
  const int slot = input_slot(c, i / H, i % H, &j);
  if (c->view[slot].present) set(c, slot, j, v); /* v absent: nothing reads it */
}

/* A value of magnitude ~amp that is non-zero in dtype dt. */
static double nonzero(tk_rng *r, qkvfuse_dtype dt, double amp) {
  /* |v| >= 2^-24, float16's smallest subnormal, is non-zero in every float
   * dtype of 16 bits or more: the rounding is needed only below (same draws) */
  const int wide = dt == QKVFUSE_DTYPE_FLOAT32 || dt == QKVFUSE_DTYPE_FLOAT16 || dt == QKVFUSE_DTYPE_BFLOAT16;
  for (;;) {
    double v = tk_rng_normal(r) * amp;
    if ((wide && fabs(v) >= 0x1p-24) || tk_round(dt, v) != 0) return v;
  }
}

static void fill_scales(tk_case *c, tk_rng *r, int slot, int off_slot, qkvfuse_quant_mode m, double mag) {
  int64_t n = tk_numel(&c->view[slot].t);
  for (int64_t i = 0; i < n; i++) {
    /* fp8: |x / scale| up to about the format's range, sometimes beyond (saturation); int8: mostly inside */
    double sc = m == QKVFUSE_QUANT_FP8_E4M3   ? mag / tk_rng_loguniform(r, 0.5, 400)
                : m == QKVFUSE_QUANT_FP8_E5M2 ? mag / tk_rng_loguniform(r, 0.5, 50000)
                                              : mag / tk_rng_uniform(r, 15, 60);
    if (tk_rng_chance(r, 0.1)) sc = -sc;
    set(c, slot, i, sc);
    if (off_slot >= 0) set(c, off_slot, i, tk_rng_uniform(r, -30, 30));
  }
}

/* A page table (include/qkvfuse.h, cache_addressing page_table): pt_batch
 * sequences, each with a random prefix of cached positions and a random share
 * of the call's live tokens at the positions after it (in token order, or
 * permuted within the sequence), its blocks (one spare at times) a run of
 * kv_indices from kv_indptr[0] = pt_lead on, holding distinct blocks of a
 * random permutation of the cache's: no two tokens share a cache row.
 * Entries no token may read (before kv_indptr[0], after kv_indptr[batch],
 * the positions of skipped tokens) hold values outside every range, so that
 * a read of one shows. */
static void fill_page_table(tk_case *c, tk_rng *r) {
  const tk_spec *s = &c->sp;
  const int64_t T = s->T, nb = s->pt_batch, bs = s->block_size;
  const int64_t nidx = tk_numel(&c->view[TK_KV_INDICES].t);
  int64_t *seq = (int64_t *)calloc((size_t)T + 1, sizeof(int64_t));
  int64_t *count = (int64_t *)calloc((size_t)nb + 1, sizeof(int64_t)), *start = (int64_t *)calloc((size_t)nb + 1, sizeof(int64_t));
  int64_t *prefix = (int64_t *)calloc((size_t)nb + 1, sizeof(int64_t)), *indptr = (int64_t *)calloc((size_t)nb + 1, sizeof(int64_t));
  int64_t *order = (int64_t *)calloc((size_t)T + 1, sizeof(int64_t));
  int64_t *perm = (int64_t *)malloc((size_t)(s->blocks > 0 ? s->blocks : 1) * sizeof(int64_t));
  for (int64_t t = 0; t < T; t++) {
    seq[t] = nb == 0 || tk_rng_chance(r, s->skip_prob) ? -1 : tk_rng_range(r, 0, nb - 1);
    if (seq[t] >= 0) count[seq[t]]++;
  }
  if (!s->pt_interleave) { /* the same shares, sequence by sequence */
    int64_t b = 0, k = 0;
    for (int64_t t = 0; t < T; t++) {
      if (seq[t] < 0) continue;
      while (k == count[b]) b++, k = 0;
      seq[t] = b, k++;
    }
  }
  /* each sequence's positions after its prefix: order[start[b] + k] for its k-th token */
  for (int64_t b = 0, at = 0; b < nb; b++) {
    start[b] = at;
    for (int64_t k = 0; k < count[b]; k++) order[at + k] = k;
    for (int64_t k = count[b] - 1; s->pt_interleave && k > 0; k--) {
      const int64_t j = tk_rng_range(r, 0, k), x = order[at + k];
      order[at + k] = order[at + j], order[at + j] = x;
    }
    at += count[b];
  }
  for (int64_t i = 0; i < nidx; i++) set(c, TK_KV_INDICES, i, i % 2 ? (double)(-2 - i % 5) : (double)(s->blocks + i % 7));
  for (int64_t i = 0; i < s->blocks; i++) perm[i] = i;
  int64_t used = 0;
  indptr[0] = s->pt_lead;
  for (int64_t b = 0; b < nb; b++) {
    prefix[b] = tk_rng_range(r, 0, s->pt_prefix);
    const int64_t pages = (prefix[b] + count[b] + bs - 1) / bs + (tk_rng_chance(r, 0.3) ? 1 : 0);
    for (int64_t j = 0; j < pages; j++, used++) {
      const int64_t k = tk_rng_range(r, used, s->blocks - 1), x = perm[used];
      perm[used] = perm[k], perm[k] = x;
      set(c, TK_KV_INDICES, indptr[b] + j, (double)perm[used]);
    }
    indptr[b + 1] = indptr[b] + pages;
  }
  for (int64_t b = 0; b <= nb; b++) set(c, TK_KV_INDPTR, b, (double)indptr[b]);
  for (int64_t b = 0; b < nb; b++) count[b] = 0; /* now: the sequence's tokens placed so far */
  for (int64_t t = 0; t < T; t++) {
    const int64_t b = seq[t];
    set(c, TK_BATCH_INDICES, t, (double)b);
    if (b < 0)
      set(c, TK_KV_POSITIONS, t, tk_rng_chance(r, 0.5) ? -3.0 : (double)(bs * nidx + 5));
    else
      set(c, TK_KV_POSITIONS, t, (double)(prefix[b] + order[start[b] + count[b]++]));
  }
  free(seq), free(count), free(start), free(prefix), free(indptr), free(order), free(perm);
}

static void fill_positions(tk_case *c, tk_rng *r) {
  const tk_spec *s = &c->sp;
  if (c->view[TK_POSITIONS].present)
    for (int64_t t = 0; t < s->T; t++) set(c, TK_POSITIONS, t, (double)tk_rng_range(r, s->pos_lo, s->pos_hi));
}

/* slot_mapping of the paged layouts: distinct slots (or -1 at skip_prob);
 * page_slots: token t in row t % block_size of the (t / block_size)-th page
 * of a random permutation of the blocks. */
static void fill_slots(tk_case *c, tk_rng *r) {
  const tk_spec *s = &c->sp;
  const int64_t total = s->blocks * s->block_size, n = s->page_slots ? s->blocks : total;
  int64_t *perm = (int64_t *)malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++) perm[i] = i;
  if (s->page_slots) {
    for (int64_t i = 0; i + 1 < n; i++) {
      int64_t j = tk_rng_range(r, i, n - 1), x = perm[i];
      perm[i] = perm[j], perm[j] = x;
    }
    for (int64_t t = 0; t < s->T; t++)
      set(c, TK_SLOT_MAPPING, t,
          tk_rng_chance(r, s->skip_prob) ? -1.0 : (double)(perm[t / s->block_size] * s->block_size + t % s->block_size));
  } else {
    for (int64_t i = 0; i < s->T; i++) {
      int64_t j = tk_rng_range(r, i, total - 1), x = perm[i];
      perm[i] = perm[j], perm[j] = x;
      set(c, TK_SLOT_MAPPING, i, tk_rng_chance(r, s->skip_prob) ? -1.0 : (double)perm[i]);
    }
  }
  free(perm);
}

void tk_case_poke(tk_case *c, int slot, int64_t flat, double v) {
  const tk_view *w = &c->view[slot];
  tk_encode(w->t.dtype, c->buf[w->buf].init + (w->off + tk_elem_offset(&w->t, flat)) * (int64_t)tk_size(w->t.dtype), v);
}

int tk_case_redraw_indices(tk_case *c, tk_rng *r) {
  const tk_spec *s = &c->sp;
  if (s->layout == QKVFUSE_CACHE_CONTIGUOUS || s->addressing == QKVFUSE_ADDRESS_PAGE_TABLE) return -1;
  fill_positions(c, r);
  if (c->view[TK_SLOT_MAPPING].present) fill_slots(c, r);
  return 0;
}

static void fill_inputs(tk_case *c, tk_rng *r) {
  const tk_spec *s = &c->sp;
  int64_t H = (s->Nq + 2 * s->Nkv) * s->D, T = s->T;
  if (s->qkv_dt == QKVFUSE_DTYPE_INT32) {
    double lim = ldexp(1.0, (int)s->acc_bits) - 1;
    for (int64_t i = 0; i < T * H; i++) {
      double a = 0;
      while (a == 0) a = (double)tk_rng_range(r, -(int64_t)lim, (int64_t)lim);
      set_input(c, i, a);
    }
    for (int64_t i = 0; i < H; i++) {
      double w = s->amp / (lim * 0.5) * tk_rng_uniform(r, 0.5, 1.5);
      set(c, TK_WEIGHT_SCALE, i, tk_rng_chance(r, 0.1) ? -w : w);
    }
    if (s->act_scale)
      for (int64_t t = 0; t < T; t++) set(c, TK_ACT_SCALE, t, tk_rng_uniform(r, 0.5, 2.0));
    if (s->bias_dt == QKVFUSE_DTYPE_INT32)
      for (int64_t i = 0; i < H; i++) set(c, TK_BIAS, i, tk_rng_chance(r, 0.5) ? tk_rng_range(r, 1, 3) : -tk_rng_range(r, 1, 3));
    else if (s->bias_dt)
      for (int64_t i = 0; i < H; i++) set(c, TK_BIAS, i, nonzero(r, s->bias_dt, 0.5 * s->amp));
  } else {
    for (int64_t i = 0; i < T * H; i++) set_input(c, i, nonzero(r, s->qkv_dt, s->amp));
  }
  int gs[2] = {TK_Q_GAMMA, TK_K_GAMMA}, bs[2] = {TK_Q_BETA, TK_K_BETA};
  for (int w = 0; w < 2; w++) {
    for (int64_t d = 0; d < s->D && c->view[gs[w]].present; d++) {
      double g = s->gamma_offset ? tk_rng_uniform(r, -0.5, 0.5) : tk_rng_uniform(r, 0.5, 1.5);
      if (!s->gamma_offset && tk_rng_chance(r, 0.1)) g = -g;
      if (g == 0) g = 0.25;
      if (s->unit_gamma) g = (tk_rng_chance(r, 0.1) ? -1.0 : 1.0) - (s->gamma_offset ? 1.0 : 0.0);
      set(c, gs[w], d, g);
    }
    for (int64_t d = 0; d < s->D && c->view[bs[w]].present; d++) set(c, bs[w], d, nonzero(r, c->view[bs[w]].t.dtype, 0.5));
  }
  fill_positions(c, r);
  if (c->view[TK_COS_SIN_CACHE].present) {
    for (int64_t p = 0; p < s->max_pos; p++) {
      for (int64_t i = 0; i < s->R / 2; i++) {
        double a = tk_rng_uniform(r, -3.14159, 3.14159);
        set(c, TK_COS_SIN_CACHE, p * s->R + i, cos(a));
        set(c, TK_COS_SIN_CACHE, p * s->R + s->R / 2 + i, sin(a));
      }
    }
  }
  if (c->view[TK_COS].present) {
    for (int64_t i = 0; i < T * s->R; i++) {
      double a = tk_rng_uniform(r, -3.14159, 3.14159);
      set(c, TK_COS, i, cos(a));
      set(c, TK_SIN, i, sin(a));
    }
  }
  if (s->layout != QKVFUSE_CACHE_NONE) {
    if (s->layout == QKVFUSE_CACHE_CONTIGUOUS) {
      for (int64_t b = 0; b < s->B; b++)
        set(c, TK_SLOT_MAPPING, b, tk_rng_chance(r, s->skip_prob) ? -1.0 : (double)tk_rng_range(r, 0, s->max_seq - s->S));
    } else if (s->addressing == QKVFUSE_ADDRESS_PAGE_TABLE) {
      fill_page_table(c, r);
    } else {
      fill_slots(c, r);
    }
    double mag_k = s->k_norm ? 1.5 : s->amp, mag_v = s->amp;
    if (s->k_quant) fill_scales(c, r, TK_K_SCALE, s->k_quant == QKVFUSE_QUANT_INT8_ASYM ? TK_K_OFFSET : -1, s->k_quant, mag_k);
    if (s->v_quant) fill_scales(c, r, TK_V_SCALE, s->v_quant == QKVFUSE_QUANT_INT8_ASYM ? TK_V_OFFSET : -1, s->v_quant, mag_v);
  }
  if (s->q_quant) fill_scales(c, r, TK_Q_SCALE, -1, s->q_quant, s->q_norm ? 1.5 : s->amp);
}

static void desc_of(tk_case *c) {
  const tk_spec *s = &c->sp;
  qkvfuse_desc d = QKVFUSE_DESC_INIT;
  d.num_q_heads = s->Nq;
  d.num_kv_heads = s->Nkv;
  d.head_dim = s->D;
  d.rotary_dim = s->R;
  d.q_norm = s->q_norm;
  d.k_norm = s->k_norm;
  d.eps = s->eps;
  d.gamma_offset = s->gamma_offset;
  d.rope_source = s->rope_source;
  d.rope_style = s->rope_style;
  d.rope_theta = s->rope_theta;
  d.rope_scaling = s->scaling;
  d.cache_layout = s->layout;
  d.cache_addressing = s->addressing;
  d.k_quant = s->k_quant;
  d.v_quant = s->v_quant;
  d.q_quant = s->q_quant;
  d.rounding = s->rounding;
  c->desc = d;
}

int tk_case_build(tk_case *c, const tk_spec *sp, uint64_t seed) {
  memset(c, 0, sizeof *c);
  c->sp = *sp;
  c->seed = seed;
  tk_rng r;
  tk_rng_seed(&r, seed);
  layout_views(c);
  if (sp->error_flags) c->buf[TK_FLAGS_BUF].bytes = 4;
  for (int b = 0; b <= TK_NSLOT; b++) {
    if (!c->buf[b].bytes) continue;
    c->buf[b].init = (uint8_t *)malloc(c->buf[b].bytes);
    c->buf[b].got = (uint8_t *)malloc(c->buf[b].bytes);
    if (!c->buf[b].init || !c->buf[b].got) return -1;
    if (b == TK_FLAGS_BUF) memset(c->buf[b].init, 0, 4);
    else tk_fill_poison(&r, c->buf[b].init, c->buf[b].bytes); /* outputs: poison; inputs: garbage padding */
  }
  fill_inputs(c, &r);
  desc_of(c);
  return 0;
}

int tk_case_upload(tk_case *c, const tk_device *dev) {
  c->dev = dev;
  for (int b = 0; b <= TK_NSLOT; b++) {
    tk_buf *x = &c->buf[b];
    if (!x->bytes) continue;
    if (!x->dev && !(x->dev = dev->alloc(x->bytes))) return -1;
    if (dev->upload(x->dev, x->init, x->bytes)) return -1;
  }
  return 0;
}

int tk_case_download(tk_case *c) {
  if (c->dev->sync(c->dev->stream)) return -1;
  for (int b = 0; b <= TK_NSLOT; b++) {
    tk_buf *x = &c->buf[b];
    if (x->bytes && c->dev->download(x->got, x->dev, x->bytes)) return -1;
  }
  return 0;
}

void tk_case_free(tk_case *c) {
  for (int b = 0; b <= TK_NSLOT; b++) {
    free(c->buf[b].init);
    free(c->buf[b].got);
    if (c->buf[b].dev && c->dev) c->dev->release(c->buf[b].dev);
  }
  memset(c, 0, sizeof *c);
}

const qkvfuse_tensor **tk_args_field(qkvfuse_args *a, int slot) {
  const qkvfuse_tensor **f[TK_NSLOT] = {&a->qkv,       &a->weight_scale, &a->act_scale,    &a->bias,    &a->q_gamma,
                                        &a->k_gamma,   &a->q_beta,       &a->k_beta,       &a->positions, &a->cos_sin_cache,
                                        &a->cos,       &a->sin,          &a->slot_mapping, &a->k_scale, &a->v_scale,
                                        &a->k_offset,  &a->v_offset,     &a->q_out,        &a->k_out,   &a->v_out,
                                        &a->k_cache,   &a->v_cache,      &a->q,            &a->k,       &a->v,
                                        &a->q_scale,   &a->kv_indptr,    &a->kv_indices,   &a->batch_indices,
                                        &a->kv_positions};
  return f[slot];
}

void tk_case_args(tk_case *c, enum tk_where where, qkvfuse_tensor tens[TK_NSLOT], qkvfuse_args *a) {
  qkvfuse_args init = QKVFUSE_ARGS_INIT;
  *a = init;
  for (int s = 0; s < TK_NSLOT; s++) {
    const tk_view *v = &c->view[s];
    if (!v->present) continue;
    const tk_buf *b = &c->buf[v->buf];
    uint8_t *base = where == TK_AT_DEVICE ? (uint8_t *)b->dev : where == TK_AT_INIT ? b->init : b->got;
    tens[s] = v->t;
    tens[s].data = base + v->off * (int64_t)tk_size(v->t.dtype);
    if (where == TK_AT_DEVICE && c->dev) {
      tens[s].device_type = c->dev->type;
      tens[s].device_id = c->dev->id;
    }
    *tk_args_field(a, s) = &tens[s];
  }
  if (c->buf[TK_FLAGS_BUF].bytes) {
    const tk_buf *b = &c->buf[TK_FLAGS_BUF];
    a->error_flags = (uint32_t *)(where == TK_AT_DEVICE ? b->dev : where == TK_AT_INIT ? (void *)b->init : (void *)b->got);
  }
}
