/* SPDX-License-Identifier: Apache-2.0 */
/* The fused chain, direct path.
 * Part of the kernels.h template: included only from there, after a
 * simd_<isa>.h, in one translation unit per instruction set. */
#ifndef QF_CPU_KERNELS_TEMPLATE
#error "include cpu/kernels.h, not its parts"
#endif

/* ---- the fused chain, direct path: one pass per head from the input ------------------ */

#if QV_W > 1
/* Whether a problem's heads fit the direct path. */
static int direct_ok(const qf_problem *p) { return qf_cpu_direct_refusal(p, QV_W) == NULL; }

/* Token t's int32 dequant terms: x = acc * ws[col] (* as) (+ bias[col]),
 * col the column in [q | k | v] (input_cols); `parity` is c->parity, under
 * which the buffered path rounds its dequantized row to the I/O dtype. */
typedef struct dequant_terms {
  const float *ws;
  const void *bias;
  qkvfuse_dtype bias_dt, io;
  int act, parity;
  qv as;
} dequant_terms;

static void dequant_terms_init(const qf_cpu_call *c, int64_t t, dequant_terms *q) {
  const qf_problem *p = c->p;
  q->ws = (const float *)p->weight_scale.data;
  q->bias = p->bias.data;
  q->bias_dt = p->bias.dtype;
  q->io = p->io_dtype;
  q->act = p->act_scale.data != NULL;
  q->parity = c->parity;
  q->as = qv_set1(q->act ? ((const float *)p->act_scale.data)[t] : 1.0f);
}

/* QV_W input elements from index j of src (dtype dt), as float32; int32
 * dequantized with dq (column col + j) in input_cols' order of operations,
 * then rounded to the I/O dtype when parity (round_row after input_cols). */
static inline __attribute__((always_inline)) qv load_input(const void *src, qkvfuse_dtype dt, const dequant_terms *dq,
                                                           int parity, int64_t col, int64_t j) {
  if (dt != QKVFUSE_DTYPE_INT32) return qv_load_dt(src, dt, j);
  qv v = qv_mul(qv_load_i32((const int32_t *)src + j), qv_loadu(dq->ws + col + j));
  if (dq->act) v = qv_mul(v, dq->as);
  if (dq->bias) v = qv_add(v, qv_load_dt(dq->bias, dq->bias_dt, col + j));
  return parity ? qv_round_dt(v, dq->io) : v;
}

/* One group of up to QV_W q or k heads of a token, on the direct path. */
typedef struct head_group {
  const void *src[QV_W]; /* each head's input; spare lanes repeat the last head */
  int64_t col[QV_W];     /* its first column in [q | k | v] (int32 dequant) */
  int64_t h0;            /* index of the first head among the q (or k) heads */
  int n;                 /* heads in the group */
  int is_k;
  float inv[QV_W]; /* RMSNorm: 1 / sqrt(mean(x^2) + eps) of each head */
} head_group;

/* How many groups' RMSNorm sums run interleaved: each sum is a chain of D
 * dependent adds (the reference's order), so one group alone is latency
 * bound; tiles of different groups alternate and their chains overlap. */
#define GROUPS_MAX 4

/* inv[] of groups gs[0..ng) from the input (dtype dt; int32 dequantized
 * with dq), each lane's sum sequential over d as in rms_inv. bfloat16 input
 * is transposed as 32-bit pairs of elements (2 QV_W columns per transpose)
 * and split with shifts: half the shuffles of a float32 tile. */
static inline __attribute__((always_inline)) void rms_inv_groups_as(head_group *const *gs, int ng, qkvfuse_dtype dt,
                                                                    const dequant_terms *dq, int64_t D, float eps) {
  qv acc[GROUPS_MAX], r[QV_W];
  for (int k = 0; k < ng; k++) acc[k] = qv_set1(0.0f);
  int64_t d = 0;
  if (dt == QKVFUSE_DTYPE_BFLOAT16)
    for (; d + 2 * QV_W <= D; d += 2 * QV_W)
      for (int k = 0; k < ng; k++) {
        for (int g = 0; g < QV_W; g++) r[g] = qv_loadu((const float *)((const uint16_t *)gs[k]->src[g] + d));
        qv_transpose(r);
        for (int e = 0; e < QV_W; e++) { /* columns d + 2e, d + 2e + 1, in this order */
          const qv lo = qv_bf16_even(r[e]), hi = qv_bf16_odd(r[e]);
          acc[k] = qv_add(acc[k], qv_mul(lo, lo));
          acc[k] = qv_add(acc[k], qv_mul(hi, hi));
        }
      }
  for (; d < D; d += QV_W)
    for (int k = 0; k < ng; k++) {
      for (int g = 0; g < QV_W; g++) r[g] = load_input(gs[k]->src[g], dt, dq, dq && dq->parity, gs[k]->col[g], d);
      qv_transpose(r);
      for (int e = 0; e < QV_W; e++) acc[k] = qv_add(acc[k], qv_mul(r[e], r[e]));
    }
  /* 1 / sqrt(ss / D + eps): IEEE division and square root, as sqrtf and / */
  for (int k = 0; k < ng; k++)
    qv_storeu(gs[k]->inv, qv_div(qv_set1(1.0f), qv_sqrt(qv_add(qv_div(acc[k], qv_set1((float)D)), qv_set1(eps)))));
}

/* rms_inv_groups_as for int32 input: out of line, so that the float path
 * inlined into token_direct carries no dequantization. */
static __attribute__((noinline)) void rms_inv_groups_int(head_group *const *gs, int ng, const dequant_terms *dq,
                                                         int64_t D, float eps) {
  rms_inv_groups_as(gs, ng, QKVFUSE_DTYPE_INT32, dq, D, eps);
}

/* rms_inv_groups_as for float input. */
static void rms_inv_groups(head_group *const *gs, int ng, qkvfuse_dtype dt, int64_t D, float eps) {
  rms_inv_groups_as(gs, ng, dt, NULL, D, eps);
}

/* One q or k head from the input (dtype dt; int32 dequantized with dq, the
 * head's first column col) into o[D]: norm (norm != 0), parity rounding,
 * RoPE, parity rounding, in registers; the caller stores o with its run of
 * heads. Always inlined into head_direct and heads_direct_int, which call
 * it with constant dt / norm / beta / parity for the common cases, so that
 * the compiler drops those tests from the loops. */
static inline __attribute__((always_inline)) void head_direct_as(const qf_cpu_call *c, const void *src,
                                                                 qkvfuse_dtype dt, const dequant_terms *dq,
                                                                 int64_t col, int norm, int parity, float inv,
                                                                 const float *g, const float *b, const float *cos_r,
                                                                 const float *sin_r, float *o) {
  const qf_problem *p = c->p;
  const int64_t D = p->D, R = p->R;
  const qkvfuse_dtype io = p->io_dtype;
  const qv iv = qv_set1(inv);
  /* a local copy: o's stores may alias *dq, so the loops would reload it */
  dequant_terms dl;
  if (dq) dl = *dq, dq = &dl;
  /* parity rounds x * inv * g before adding beta (norm_row) */
#define QF_NORM(x, i)                                                                                     \
  (b ? qv_add(parity ? qv_round_dt(qv_mul(qv_mul(x, iv), qv_loadu(g + (i))), io)                        \
                     : qv_mul(qv_mul(x, iv), qv_loadu(g + (i))),                                       \
              qv_loadu(b + (i)))                                                                        \
     : qv_mul(qv_mul(x, iv), qv_loadu(g + (i))))
  if (R > 0 && p->desc->rope_style == QKVFUSE_ROPE_INTERLEAVED) {
    for (int64_t j = 0; j < R; j += QV_W) {
      qv y = load_input(src, dt, dq, parity, col, j);
      if (norm) {
        y = QF_NORM(y, j);
        if (parity) y = qv_round_dt(y, io);
      }
      qv r = qv_rope_pairs(y, qv_loadu(cos_r + j), qv_loadu(sin_r + j));
      if (parity) r = qv_round_dt(r, io);
      qv_storeu(o + j, r);
    }
  } else if (R > 0) {
    const int64_t h = R / 2;
    for (int64_t i = 0; i < h; i += QV_W) {
      qv lo = load_input(src, dt, dq, parity, col, i), hi = load_input(src, dt, dq, parity, col, h + i);
      if (norm) {
        lo = QF_NORM(lo, i);
        hi = QF_NORM(hi, h + i);
        if (parity) lo = qv_round_dt(lo, io), hi = qv_round_dt(hi, io);
      }
      qv ol = qv_sub(qv_mul(lo, qv_loadu(cos_r + i)), qv_mul(hi, qv_loadu(sin_r + i)));
      qv oh = qv_add(qv_mul(hi, qv_loadu(cos_r + h + i)), qv_mul(lo, qv_loadu(sin_r + h + i)));
      if (parity) ol = qv_round_dt(ol, io), oh = qv_round_dt(oh, io);
      qv_storeu(o + i, ol);
      qv_storeu(o + h + i, oh);
    }
  }
  /* dims R..D-1 pass RoPE unchanged; one parity rounding covers both stages (it is idempotent) */
  for (int64_t d = R; d < D; d += QV_W) {
    qv y = load_input(src, dt, dq, parity, col, d);
    if (norm) y = QF_NORM(y, d);
    if (parity) y = qv_round_dt(y, io);
    qv_storeu(o + d, y);
  }
#undef QF_NORM
}

static void head_direct(const qf_cpu_call *c, const void *src, qkvfuse_dtype dt, int norm, float inv, const float *g,
                        const float *b, const float *cos_r, const float *sin_r, float *o) {
  if (!b && !c->parity) {
#define QF_AS(DT)                                                               \
  if (dt == DT) {                                                               \
    if (norm)                                                                   \
      head_direct_as(c, src, DT, NULL, 0, 1, 0, inv, g, NULL, cos_r, sin_r, o); \
    else                                                                        \
      head_direct_as(c, src, DT, NULL, 0, 0, 0, inv, g, NULL, cos_r, sin_r, o); \
    return;                                                                     \
  }
    QF_AS(QKVFUSE_DTYPE_BFLOAT16)
    QF_AS(QKVFUSE_DTYPE_FLOAT16)
    QF_AS(QKVFUSE_DTYPE_FLOAT32)
#undef QF_AS
  }
  head_direct_as(c, src, dt, NULL, 0, norm, c->parity, inv, g, b, cos_r, sin_r, o);
}

/* What a group's heads prefetch of token `ahead`, head by head: the input
 * row (in NULL: in place), the output row and, for k heads with a
 * destination (next_dest at nb, nr), the k cache row. */
typedef struct head_prefetch {
  const qf_mat *in, *out;
  size_t es_in, es_out, es_cache;
  int64_t ahead, nb, nr;
  int next_dest;
} head_prefetch;

/* Head h's prefetch: one head at a time, spread through the work, since a
 * burst per run or per token leaves the arithmetic waiting. */
static inline __attribute__((always_inline)) void prefetch_head(const qf_problem *p, const head_prefetch *pf,
                                                                int64_t h) {
  const int64_t D = p->D;
  if (pf->in) prefetch_ahead(pf->in, pf->es_in, pf->ahead, h * D, D, 0);
  prefetch_ahead(pf->out, pf->es_out, pf->ahead, h * D, D, 1);
  if (pf->next_dest) prefetch_cache_head(p, &p->k_cache, pf->es_cache, h, pf->nb, pf->nr);
}

/* Heads g0 .. g0 + nh - 1 of group gr for int32 input, dequantized with dq,
 * head g into o + (g - g0) * D after its prefetch: out of line, so that the
 * float path carries no dequantization, and one call per run, since a call
 * per head costs a third of a head's arithmetic. */
static __attribute__((noinline)) void heads_direct_int(const qf_cpu_call *c, const head_group *gr, int g0, int nh,
                                                       const dequant_terms *dq, int norm, const float *gamma,
                                                       const float *beta, const float *cos_r, const float *sin_r,
                                                       const head_prefetch *pf, float *o) {
  const qkvfuse_dtype i32 = QKVFUSE_DTYPE_INT32;
  const int64_t D = c->p->D;
  for (int g = g0; g < g0 + nh; g++) {
    prefetch_head(c->p, pf, gr->h0 + g);
    const float inv = norm ? gr->inv[g] : 0.0f;
    float *oh = o + (g - g0) * D;
    if (!beta && !c->parity && norm)
      head_direct_as(c, gr->src[g], i32, dq, gr->col[g], 1, 0, inv, gamma, NULL, cos_r, sin_r, oh);
    else if (!beta && !c->parity)
      head_direct_as(c, gr->src[g], i32, dq, gr->col[g], 0, 0, inv, gamma, NULL, cos_r, sin_r, oh);
    else
      head_direct_as(c, gr->src[g], i32, dq, gr->col[g], norm, c->parity, inv, gamma, beta, cos_r, sin_r, oh);
  }
}

/* The rotated heads of one group: head_direct, then q_out or k_out and the
 * k cache; prefetching each head's row `ahead`. Consecutive heads are
 * stored in runs of up to HEAD_MAX elements (the k cache's where its rows
 * follow one another, as in v_heads_direct). */
static void group_heads_direct(const qf_cpu_call *c, const head_group *gr, const dequant_terms *dq, int64_t t,
                               int64_t ahead, int norm, const float *cos_r, const float *sin_r, int have_dest,
                               int64_t block, int64_t row) {
  const qf_problem *p = c->p;
  const qf_cache *kc = &p->k_cache;
  const int64_t D = p->D;
  const qf_mat *in = &p->in[gr->is_k], *out = gr->is_k ? &p->k_out : &p->q_out;
  const size_t es_out = gr->is_k ? c->es_k_out : c->es_q_out;
  char *dst = out->data ? row_ptr(out, t, es_out) : NULL;
  int64_t nb = 0, nr = 0;
  const int next_dest = gr->is_k && dest_ahead(p, ahead, &nb, &nr);
  /* in place (the output's rows are the input's): one prefetch for writing
   * brings each line, where a read prefetch first would fetch it twice */
  const int in_place = out->data == in->data && out->ld == in->ld && out->dtype == in->dtype;
  const head_prefetch pf = {in_place ? NULL : in, out, c->es_in, es_out, c->es_k_cache, ahead, nb, nr, next_dest};
  const float *gamma = gr->is_k ? c->k_gamma : c->q_gamma, *beta = gr->is_k ? c->k_beta : c->q_beta;
  const int to_cache = gr->is_k && have_dest;
  const int64_t step = heads_per_run(kc, to_cache, D);
  float o[HEAD_MAX];
  for (int g0 = 0; g0 < gr->n; g0 += (int)step) {
    const int nh = gr->n - g0 < step ? gr->n - g0 : (int)step;
    if (c->int_input)
      heads_direct_int(c, gr, g0, nh, dq, norm, gamma, beta, cos_r, sin_r, &pf, o);
    else
      for (int g = g0; g < g0 + nh; g++) {
        prefetch_head(p, &pf, gr->h0 + g);
        head_direct(c, gr->src[g], p->in[0].dtype, norm, norm ? gr->inv[g] : 0.0f, gamma, beta, cos_r, sin_r,
                    o + (g - g0) * D);
      }
    const int64_t h0 = gr->h0 + g0;
    if (dst) out_heads(p, gr->is_k, dst + (size_t)(h0 * D) * es_out, out->dtype, o, nh * D);
    if (to_cache)
      cache_heads(p, kc, c->es_k_cache, p->desc->k_quant, &p->k_scale, &p->k_offset, p->k_scale_group, h0, nh, o,
                  block, row);
  }
}

static void v_heads_direct(const qf_cpu_call *c, int64_t t, int64_t ahead, int have_dest, int64_t block, int64_t row);

/* Token t on the direct path: the q heads [q0, q1) and/or the k and v heads
 * (do_kv), GROUPS_MAX groups of heads at a time: first their RMSNorm sums,
 * interleaved, then each head in one pass. */
static void token_direct(const qf_cpu_call *c, int64_t t, const float *cos_r, const float *sin_r, int64_t q0,
                         int64_t q1, int64_t q_ahead, int do_kv, int64_t kv_ahead, int have_dest, int64_t block,
                         int64_t row) {
  const qf_problem *p = c->p;
  const int64_t D = p->D;
  const char *rows[2] = {input_at(p, t, 0, c->es_in), input_at(p, t, p->Nq * D, c->es_in)}; /* q, k */
  const int64_t nq = (q1 - q0 + QV_W - 1) / QV_W, nk = do_kv ? (p->Nkv + QV_W - 1) / QV_W : 0;
  head_group groups[GROUPS_MAX];
  dequant_terms dq;
  dequant_terms_init(c, t, &dq);
  for (int64_t g0 = 0; g0 < nq + nk; g0 += GROUPS_MAX) {
    const int ng = nq + nk - g0 < GROUPS_MAX ? (int)(nq + nk - g0) : GROUPS_MAX;
    head_group *normed[GROUPS_MAX];
    int nn = 0;
    for (int k = 0; k < ng; k++) {
      head_group *gr = &groups[k];
      const int64_t gi = g0 + k;
      gr->is_k = gi >= nq;
      gr->h0 = gr->is_k ? (gi - nq) * QV_W : q0 + gi * QV_W;
      const int64_t count = gr->is_k ? p->Nkv : q1;
      gr->n = count - gr->h0 < QV_W ? (int)(count - gr->h0) : QV_W;
      for (int g = 0; g < QV_W; g++) {
        const int64_t h = gr->h0 + (g < gr->n ? g : gr->n - 1);
        gr->src[g] = rows[gr->is_k] + (size_t)(h * D) * c->es_in;
        gr->col[g] = ((gr->is_k ? p->Nq : 0) + h) * D;
      }
      if (gr->is_k ? p->desc->k_norm : p->desc->q_norm) normed[nn++] = gr;
    }
    if (nn && c->int_input)
      rms_inv_groups_int(normed, nn, &dq, D, p->desc->eps);
    else if (nn)
      rms_inv_groups(normed, nn, p->in[0].dtype, D, p->desc->eps);
    for (int k = 0; k < ng; k++) {
      const int is_k = groups[k].is_k;
      group_heads_direct(c, &groups[k], &dq, t, is_k ? kv_ahead : q_ahead, is_k ? p->desc->k_norm : p->desc->q_norm,
                         cos_r, sin_r, have_dest, block, row);
    }
  }
  if (do_kv && (p->v_out.data || have_dest)) v_heads_direct(c, t, kv_ahead, have_dest, block, row);
}

/* The v heads of token t on the direct path: a same-dtype v_out or float
 * cache row is a copy (copy_row); otherwise the heads are converted (int32:
 * dequantized, as on the buffered path) once. Heads whose cache rows follow
 * one another (one chunk each, D elements apart: paged, contiguous) go in
 * runs of up to HEAD_MAX elements, one conversion and one store per run: a
 * call per head would cost about as much as the head's arithmetic. */
static void v_heads_direct(const qf_cpu_call *c, int64_t t, int64_t ahead, int have_dest, int64_t block, int64_t row) {
  const qf_problem *p = c->p;
  const qf_cache *vc = &p->v_cache;
  const int64_t D = p->D, W = p->Nkv * D;
  const qkvfuse_dtype dt = p->in[0].dtype;
  const char *in = input_at(p, t, (p->Nq + p->Nkv) * D, c->es_in);
  char *dst = p->v_out.data ? row_ptr(&p->v_out, t, c->es_v_out) : NULL;
  const int copy_out = dst && p->v_out.dtype == dt;
  const int copy_cache = p->desc->v_quant == QKVFUSE_QUANT_NONE && vc->dtype == dt && vc->chunk == D;
  int64_t nb = 0, nr = 0;
  const int next_dest = dest_ahead(p, ahead, &nb, &nr);
  prefetch_input(p, c->es_in, ahead, (p->Nq + p->Nkv) * D, W);
  prefetch_ahead(&p->v_out, c->es_v_out, ahead, 0, W, 1);
  if (copy_out) copy_row(dst, in, dt, W);
  if (!(dst && !copy_out) && !have_dest) return;
  const int convert = (dst && !copy_out) || (have_dest && !copy_cache);
  const int64_t step = heads_per_run(vc, have_dest, D);
  float x[HEAD_MAX];
  for (int64_t h = 0; h < p->Nkv; h += step) {
    const int64_t n = (p->Nkv - h < step ? p->Nkv - h : step) * D;
    const char *src = in + (size_t)(h * D) * c->es_in;
    if (next_dest)
      for (int64_t g = h; g < h + n / D; g++) prefetch_cache_head(p, vc, c->es_v_cache, g, nb, nr);
    if (convert && c->int_input) {
      input_cols(p, t, (p->Nq + p->Nkv + h) * D, n, x);
      if (c->parity) round_row(x, n, p->io_dtype);
    } else if (convert) {
      load_row(src, dt, x, n);
    }
    if (dst && !copy_out) store_row(dst + (size_t)(h * D) * c->es_v_out, p->v_out.dtype, x, n);
    if (!have_dest) continue;
    if (copy_cache)
      copy_row(elem_ptr(vc->data, head_chunk_offset(vc, block, row, h), c->es_v_cache), src, dt, n);
    else
      cache_heads(p, vc, c->es_v_cache, p->desc->v_quant, &p->v_scale, &p->v_offset, p->v_scale_group, h, n / D, x,
                  block, row);
  }
}
#endif /* QV_W > 1 */
