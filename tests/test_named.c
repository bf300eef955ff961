/* SPDX-License-Identifier: Apache-2.0 */
/* The three named entry points (qkvfuse.h, docs/API.md "Named operators"):
 *   1. on random inputs in the seed's configuration, against the oracle and
 *      byte-identical to the core operator with the equivalent descriptor;
 *   2. their own argument checks (bad strings, inconsistent size_splits /
 *      qkv_size / head_nums, output flags without outputs...): exact status,
 *      message naming the argument, nothing written.
 *   test_named [--backend auto|cuda] [--seed S] [--cases N] [--verbose]
 * The random cases run on the backend's device (the named ops use the default
 * backend of their tensors' device); the argument checks run on the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp.h"
#include "harness.h"
#include "tview.h"

enum { OP_SPLIT = 1, OP_CACHE = 2, OP_DEQUANT = 3 };

typedef struct named_ctx {
  int op;
  double eps;
  int64_t rope_dim;           /* OP_SPLIT: 0 means head_dim */
  const char *cache_mode, *quant_mode, *layout;
  int flag;                   /* is_output_qkv / kv_output */
  int64_t qkv_size[4], head_nums[3], size_splits[3];
  const int64_t *qkv_size_p, *head_nums_p, *size_splits_p;
  const qkvfuse_tensor *q_before; /* OP_CACHE: q_out_before_quant */
  const qkvfuse_tensor *k_extra, *v_extra; /* outputs passed although the flag is 0 */
  const qkvfuse_tensor *ignored;  /* OP_DEQUANT, float x: passed as weight_scale, activation_scale and bias */
  int drop_k_out, drop_v_out;     /* pass NULL for k/v outputs although the flag is 1 */
} named_ctx;

static qkvfuse_status run_named(tk_case *c, const qkvfuse_args *a, qkvfuse_backend be, void *vctx, int *unsupported) {
  (void)be, (void)unsupported;
  named_ctx *x = (named_ctx *)vctx;
  const tk_spec *s = &c->sp;
  const qkvfuse_tensor *ko = x->flag ? a->k_out : x->k_extra, *vo = x->flag ? a->v_out : x->v_extra;
  if (x->drop_k_out) ko = NULL;
  if (x->drop_v_out) vo = NULL;
  switch (x->op) {
    case OP_SPLIT:
      return qkvfuse_split_qkv_rmsnorm_rope(a->qkv, a->q_gamma, a->k_gamma, s->Nq * s->D, s->Nkv * s->D, s->D, x->eps,
                                            a->cos_sin_cache, a->positions, x->rope_dim, a->q_beta, a->k_beta,
                                            s->rope_style == QKVFUSE_ROPE_NEOX, a->q_out,
                                            x->drop_k_out ? NULL : a->k_out, x->drop_v_out ? NULL : a->v_out,
                                            a->error_flags, c->dev->stream);
    case OP_CACHE:
      return qkvfuse_qkv_rmsnorm_rope_cache(a->qkv, a->q_gamma, a->k_gamma, a->cos, a->sin, a->slot_mapping, a->q_out,
                                            a->k_cache, a->v_cache, a->k_scale, a->v_scale, a->k_offset, a->v_offset,
                                            x->q_before, ko, vo, x->qkv_size_p, x->head_nums_p, x->eps, x->cache_mode,
                                            x->flag, a->error_flags, c->dev->stream);
    default:
      return qkvfuse_dequant_rope_quant_kvcache(a->qkv, a->cos, a->sin, a->k_cache, a->v_cache, a->slot_mapping,
                                                a->k_scale, a->v_scale, a->k_offset, a->v_offset,
                                                x->ignored ? x->ignored : a->weight_scale,
                                                x->ignored ? x->ignored : a->act_scale,
                                                x->ignored ? x->ignored : a->bias, x->size_splits_p, x->quant_mode, x->layout,
                                                x->flag, x->cache_mode, a->q_out, ko, vo, a->error_flags,
                                                c->dev->stream);
  }
}

static const qkvfuse_dtype FDT[] = {QKVFUSE_DTYPE_FLOAT32, QKVFUSE_DTYPE_FLOAT16, QKVFUSE_DTYPE_BFLOAT16};
static const int64_t DS[] = {16, 64, 80, 128, 256};
static const int64_t TS[] = {0, 1, 7, 33, 200};

/* A random spec in op's configuration, and the matching ctx. */
static void named_spec(int op, tk_rng *r, tk_spec *s, named_ctx *x) {
  tk_spec_default(s);
  memset(x, 0, sizeof *x);
  x->op = op;
  s->D = TK_PICK(r, DS);
  s->Nkv = tk_rng_range(r, 1, 2);
  s->Nq = tk_rng_chance(r, 0.8) ? s->Nkv * tk_rng_range(r, 1, 4) : tk_rng_range(r, 1, 5); /* any counts */
  s->T = TK_PICK(r, TS);
  s->qkv_pad = tk_rng_chance(r, 0.5) ? 0 : tk_rng_range(r, 1, 9);
  s->out_pad = tk_rng_chance(r, 0.5) ? 0 : tk_rng_range(r, 1, 9);
  s->error_flags = tk_rng_chance(r, 0.5);
  s->amp = tk_rng_loguniform(r, 0.05, 20);
  static const float epss[] = {1e-6f, 1e-5f, 0.25f};
  s->eps = TK_PICK(r, epss);
  x->eps = s->eps;
  x->flag = tk_rng_chance(r, 0.6);
  if (op == OP_SPLIT) {
    s->qkv_dt = TK_PICK(r, FDT);
    s->q_out_dt = s->k_out_dt = s->v_out_dt = tk_rng_chance(r, 0.7) ? s->qkv_dt : QKVFUSE_DTYPE_FLOAT32;
    s->q_norm = s->k_norm = 1;
    s->q_gamma_dt = TK_PICK(r, FDT), s->k_gamma_dt = TK_PICK(r, FDT);
    if (tk_rng_chance(r, 0.5)) s->q_beta_dt = TK_PICK(r, FDT), s->k_beta_dt = TK_PICK(r, FDT);
    s->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
    s->rope_style = tk_rng_chance(r, 0.7) ? QKVFUSE_ROPE_NEOX : QKVFUSE_ROPE_INTERLEAVED;
    s->rope_dt = TK_PICK(r, FDT);
    s->R = tk_rng_chance(r, 0.5) ? s->D : 2 * tk_rng_range(r, 1, s->D / 2);
    s->max_pos = tk_rng_range(r, 1, 1024), s->pos_hi = s->max_pos - 1;
    s->pos_dt = tk_rng_chance(r, 0.5) ? QKVFUSE_DTYPE_INT32 : QKVFUSE_DTYPE_INT64;
    x->rope_dim = (s->R == s->D && tk_rng_chance(r, 0.5)) ? 0 : s->R;
    s->in_place_q = s->in_place_k = tk_rng_chance(r, 0.2);
  } else if (op == OP_CACHE) {
    s->qkv_dt = s->q_out_dt = s->rope_dt = s->q_gamma_dt = s->k_gamma_dt = TK_PICK(r, FDT);
    if (x->flag) s->k_out_dt = s->v_out_dt = s->qkv_dt;
    s->q_norm = s->k_norm = 1;
    s->rope_source = QKVFUSE_ROPE_COS_SIN, s->R = s->D, s->out_split_heads = tk_rng_chance(r, 0.5);
    static const qkvfuse_cache_layout Ls[] = {QKVFUSE_CACHE_NZ, QKVFUSE_CACHE_PAGED_HND, QKVFUSE_CACHE_PAGED};
    s->layout = TK_PICK(r, Ls);
    s->k_quant = (qkvfuse_quant_mode)tk_rng_range(r, 0, 3), s->v_quant = (qkvfuse_quant_mode)tk_rng_range(r, 0, 3);
    s->k_cache_dt = s->v_cache_dt = s->qkv_dt;
    s->k_scale_kind = tk_rng_chance(r, 0.7) ? 2 : 3, s->v_scale_kind = tk_rng_chance(r, 0.7) ? 2 : 3;
    s->block_size = tk_rng_chance(r, 0.5) ? 16 : 32;
    s->slot_dt = tk_rng_chance(r, 0.8) ? QKVFUSE_DTYPE_INT64 : QKVFUSE_DTYPE_INT32;
    s->skip_prob = tk_rng_chance(r, 0.5) ? 0.2 : 0;
  } else {
    static const qkvfuse_dtype xdt[] = {QKVFUSE_DTYPE_FLOAT16, QKVFUSE_DTYPE_BFLOAT16, QKVFUSE_DTYPE_INT32, QKVFUSE_DTYPE_INT32};
    s->qkv_dt = TK_PICK(r, xdt);
    s->rope_dt = s->qkv_dt == QKVFUSE_DTYPE_INT32 ? FDT[tk_rng_range(r, 1, 2)] : s->qkv_dt;
    s->q_out_dt = s->rope_dt;
    if (x->flag) s->k_out_dt = s->v_out_dt = s->rope_dt;
    if (s->qkv_dt == QKVFUSE_DTYPE_INT32) {
      static const qkvfuse_dtype bdt[] = {QKVFUSE_DTYPE_NONE, QKVFUSE_DTYPE_FLOAT32, QKVFUSE_DTYPE_FLOAT16,
                                          QKVFUSE_DTYPE_BFLOAT16, QKVFUSE_DTYPE_INT32};
      s->act_scale = tk_rng_chance(r, 0.5), s->bias_dt = TK_PICK(r, bdt), s->acc_bits = 16;
    }
    s->rope_source = QKVFUSE_ROPE_COS_SIN, s->R = s->D, s->out_split_heads = tk_rng_chance(r, 0.5);
    s->layout = tk_rng_chance(r, 0.5) ? QKVFUSE_CACHE_CONTIGUOUS : QKVFUSE_CACHE_PAGED;
    s->k_quant = tk_rng_chance(r, 0.5) ? QKVFUSE_QUANT_INT8_SYM : QKVFUSE_QUANT_INT8_ASYM;
    s->v_quant = tk_rng_chance(r, 0.5) ? QKVFUSE_QUANT_INT8_SYM : QKVFUSE_QUANT_INT8_ASYM;
    s->k_scale_kind = s->v_scale_kind = tk_rng_chance(r, 0.5) ? 2 : 3;
    s->slot_dt = tk_rng_chance(r, 0.5) ? QKVFUSE_DTYPE_INT64 : QKVFUSE_DTYPE_INT32;
    s->block_size = 8;
    s->skip_prob = tk_rng_chance(r, 0.5) ? 0.2 : 0;
    int two_d = tk_rng_chance(r, 0.4);
    s->in3d = two_d ? 2 : 1;
    s->B = two_d ? s->T : tk_rng_range(r, 1, 3);
    s->S = two_d ? 1 : (s->T + s->B - 1) / s->B;
    if (s->layout == QKVFUSE_CACHE_CONTIGUOUS) s->cache_batch = s->B + 1, s->max_seq = s->S + 4;
    if (two_d) s->out_split_heads = 0;
    x->quant_mode = tk_rng_chance(r, 0.5) ? "static" : NULL;
    x->layout = tk_rng_chance(r, 0.5) ? "BSND" : NULL;
    /* the seed's D up to 1024: one case in 4 above 512, drawn from a stream of
       its own so that the other draws stay as they were */
    static const int64_t WIDE[] = {528, 640, 1024};
    tk_rng side = *r;
    tk_rng_seed(&side, tk_rng_next(&side) ^ 0xD1024ull);
    if (tk_rng_range(&side, 0, 3) == 0) s->D = s->R = TK_PICK(&side, WIDE);
  }
  tk_spec_fixup(s);
  if (op == OP_CACHE) {
    if (s->layout == QKVFUSE_CACHE_NZ) x->cache_mode = tk_rng_chance(r, 0.5) ? "PA_NZ" : NULL;
    else if (s->layout == QKVFUSE_CACHE_PAGED_HND) x->cache_mode = "PA_BNSD";
    else x->cache_mode = tk_rng_chance(r, 0.5) ? "PA" : "PA_BSND";
    int64_t B = 1;
    for (int64_t b = 2; b <= 4; b++)
      if (s->T % b == 0) B = b;
    x->qkv_size[0] = B, x->qkv_size[1] = s->T / B, x->qkv_size[2] = s->Nq + 2 * s->Nkv, x->qkv_size[3] = s->D;
    x->head_nums[0] = s->Nq, x->head_nums[1] = x->head_nums[2] = s->Nkv;
    x->qkv_size_p = x->qkv_size, x->head_nums_p = x->head_nums;
  }
  if (op == OP_DEQUANT) {
    x->cache_mode = s->layout == QKVFUSE_CACHE_CONTIGUOUS ? (tk_rng_chance(r, 0.5) ? "contiguous" : NULL) : "page";
    x->size_splits[0] = s->Nq * s->D, x->size_splits[1] = x->size_splits[2] = s->Nkv * s->D;
    x->size_splits_p = x->size_splits;
  }
}

static int failed, checks;

static void fail(const char *fmt, const char *a, const char *b, const char *c) {
  failed++;
  printf(fmt, a, b, c);
}

/* An extra output shaped like slot's view of case c, on device dev: *init
 * holds its poison (host), *buf its host copy after tk_download_extra. */
typedef struct extra_out {
  qkvfuse_tensor t;
  const tk_device *dev;
  void *dev_buf;
  uint8_t *buf, *init;
  size_t n;
} extra_out;

static const qkvfuse_tensor *poison_like(tk_case *c, int slot, const tk_device *dev, extra_out *x) {
  const tk_view *v = &c->view[slot];
  x->n = c->buf[v->buf].bytes;
  x->dev = dev;
  x->dev_buf = dev->alloc(x->n);
  x->buf = (uint8_t *)malloc(x->n);
  x->init = (uint8_t *)malloc(x->n);
  tk_rng r;
  tk_rng_seed(&r, 404);
  tk_fill_poison(&r, x->init, x->n);
  dev->upload(x->dev_buf, x->init, x->n);
  x->t = v->t;
  x->t.device_type = dev->type;
  x->t.device_id = dev->id;
  x->t.data = (uint8_t *)x->dev_buf + v->off * (int64_t)tk_size(v->t.dtype);
  return &x->t;
}

static void download_extra(extra_out *x) {
  if (x->dev_buf) x->dev->sync(x->dev->stream), x->dev->download(x->buf, x->dev_buf, x->n);
}

static void free_extra(extra_out *x) {
  if (x->dev_buf) x->dev->release(x->dev_buf);
  free(x->buf), free(x->init);
  memset(x, 0, sizeof *x);
}

static const char *OPNAME[] = {"", "split_qkv_rmsnorm_rope", "qkv_rmsnorm_rope_cache", "dequant_rope_quant_kvcache"};

static void one_case(int op, uint64_t seed, qkvfuse_backend be, int verbose) {
  tk_rng r;
  tk_rng_seed(&r, seed);
  tk_spec s;
  named_ctx x;
  named_spec(op, &r, &s, &x);
  /* the seed's vectors given strided (DequantRopeQuantKvcache takes
     non-contiguous tensors), which CPU plans copy (docs/API.md, "Strides"):
     one case in 3, drawn from a stream of its own */
  tk_rng side;
  tk_rng_seed(&side, seed ^ 0x57D1DEull);
  if (op == OP_DEQUANT && be != QKVFUSE_BACKEND_CUDA && tk_rng_range(&side, 0, 2) == 0)
    s.strided = (1ull << TK_K_SCALE) | (1ull << TK_V_SCALE) | (1ull << TK_K_OFFSET) | (1ull << TK_V_OFFSET) |
                (1ull << TK_WEIGHT_SCALE) | (1ull << TK_ACT_SCALE) | (1ull << TK_BIAS) | (1ull << TK_SLOT_MAPPING);
  tk_spec_fit_gather(&s);
  char desc[1024];
  tk_spec_describe(&s, desc, sizeof desc);
  if (verbose) printf("%s: %s\n", OPNAME[op], desc);
  tk_case c;
  tk_case_build(&c, &s, seed + 1);
  const tk_device *dev = tk_device_for_backend(be);
  extra_out qb = {0}, kx = {0}, vx = {0};
  if (op == OP_CACHE && x.flag) x.q_before = poison_like(&c, TK_Q_OUT, dev, &qb);
  if (op != OP_SPLIT && !x.flag) {
    /* outputs given with the flag at 0: the seeds ignore them, and so must the op */
    tk_spec s2 = s;
    s2.k_out_dt = s2.v_out_dt = s.q_out_dt;
    tk_case c2;
    tk_case_build(&c2, &s2, seed + 2);
    x.k_extra = poison_like(&c2, TK_K_OUT, dev, &kx);
    x.v_extra = poison_like(&c2, TK_V_OUT, dev, &vx);
    tk_case_free(&c2);
  }
  /* dequant scales given with float x: the seed says they have no effect, so they are
     neither read nor checked (a wrong shape, and host memory on any device) */
  static const float unread[5] = {0};
  qkvfuse_tensor ignored;
  if (op == OP_DEQUANT && s.qkv_dt != QKVFUSE_DTYPE_INT32 && tk_rng_chance(&r, 0.5)) {
    qkvfuse_tensor_init(&ignored, (void *)unread, QKVFUSE_DTYPE_FLOAT32, 1, (const int64_t[]){5});
    ignored.device_type = dev->type, ignored.device_id = dev->id;
    x.ignored = &ignored;
  }
  tk_stats st;
  memset(&st, 0, sizeof st);
  checks++;
  int rc = tk_check_case(&c, be, run_named, &x, &st);
  download_extra(&qb), download_extra(&kx), download_extra(&vx);
  if (rc == TK_SKIP) {
    tk_case_free(&c);
    free_extra(&qb), free_extra(&kx), free_extra(&vx);
    return;
  }
  if (rc == TK_PASS) {
    /* the same case through the core op must give the very same bytes */
    uint8_t *saved[TK_NSLOT + 1];
    for (int b = 0; b <= TK_NSLOT; b++) {
      saved[b] = c.buf[b].bytes ? (uint8_t *)malloc(c.buf[b].bytes) : NULL;
      if (saved[b]) memcpy(saved[b], c.buf[b].got, c.buf[b].bytes);
    }
    tk_stats st2;
    memset(&st2, 0, sizeof st2);
    /* on CUDA a second q output (q_out_before_quant) runs on the general kernel only: the core
       op runs there too, for the kernels' float32 sums may round apart (both within SPEC) */
    const int general = be == QKVFUSE_BACKEND_CUDA && x.q_before;
    if (tk_check_case(&c, be, tk_run_core, general ? (void *)"cuda.form=general" : NULL, &st2) != TK_PASS)
      tk_stats_fail(&st, "core op on the same case: %s", st2.first);
    for (int b = 0; b <= TK_NSLOT; b++) {
      if (saved[b] && memcmp(saved[b], c.buf[b].got, c.buf[b].bytes)) {
        size_t first = 0, count = 0;
        for (size_t i = c.buf[b].bytes; i-- > 0;)
          if (saved[b][i] != c.buf[b].got[i]) first = i, count++;
        tk_stats_fail(&st,
                      "%s: bytes differ from the core op with the equivalent descriptor (%zu of %zu bytes, "
                      "the first at byte %zu: 0x%02x named, 0x%02x core)",
                      b < TK_NSLOT ? tk_slot_name[b] : "error_flags", count, (size_t)c.buf[b].bytes, first,
                      saved[b][first], c.buf[b].got[first]);
      }
      free(saved[b]);
    }
    if (x.q_before) {
      const qkvfuse_tensor *q = &c.view[TK_Q_OUT].t;
      size_t es = tk_size(q->dtype);
      const uint8_t *qd = c.buf[c.view[TK_Q_OUT].buf].got + c.view[TK_Q_OUT].off * (int64_t)es;
      for (int64_t i = 0; i < tk_numel(q); i++) {
        int64_t off = tk_elem_offset(q, i) * (int64_t)es;
        if (memcmp(qb.buf + c.view[TK_Q_OUT].off * (int64_t)es + off, qd + off, es)) {
          tk_stats_fail(&st, "q_out_before_quant[%lld] differs from q_out", (long long)i);
          break;
        }
        memcpy(qb.init + c.view[TK_Q_OUT].off * (int64_t)es + off, qd + off, es); /* expected written */
      }
      tk_cmp_untouched(&st, "q_out_before_quant (outside q_out's elements)", qb.buf, qb.init, NULL, qb.n);
    }
    if (x.k_extra) tk_cmp_untouched(&st, "k output given with the flag 0", kx.buf, kx.init, NULL, kx.n);
    if (x.v_extra) tk_cmp_untouched(&st, "v output given with the flag 0", vx.buf, vx.init, NULL, vx.n);
  }
  if (rc != TK_PASS || st.failed) {
    failed++;
    printf("FAIL test_named %s seed=0x%llx: %s\n  spec: %s\n", OPNAME[op], (unsigned long long)seed, st.first, desc);
  }
  free_extra(&qb), free_extra(&kx), free_extra(&vx);
  tk_case_free(&c);
}

/* A token whose index is outside the cache, with is_output_qkv = 1: the CPU
 * rejects the call and writes nothing; CUDA drops the token (flag SLOT) and
 * writes none of its rows, q_out_before_quant's included, and every other
 * token's q_out_before_quant row equals its q_out row. */
static void rejected_token(qkvfuse_backend be) {
  tk_rng r;
  tk_rng_seed(&r, 777);
  tk_spec s;
  named_ctx x;
  do named_spec(OP_CACHE, &r, &s, &x);
  while (s.T < 4);
  x.flag = 1;
  s.k_out_dt = s.v_out_dt = s.q_out_dt;
  s.error_flags = 1, s.skip_prob = 0;
  s.layout = QKVFUSE_CACHE_PAGED, x.cache_mode = "PA";
  tk_spec_fixup(&s);
  tk_case c;
  tk_case_build(&c, &s, 778);
  const tk_device *dev = tk_device_for_backend(be);
  const int64_t bad = 2;
  const tk_view *sm = &c.view[TK_SLOT_MAPPING];
  tk_encode(sm->t.dtype, c.buf[sm->buf].init + (sm->off + tk_elem_offset(&sm->t, bad)) * (int64_t)tk_size(sm->t.dtype),
            (double)(s.blocks * s.block_size + 5));
  extra_out qb = {0};
  x.q_before = poison_like(&c, TK_Q_OUT, dev, &qb);
  tk_case_upload(&c, dev);
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_args(&c, TK_AT_DEVICE, tens, &a);
  int unsupported = 0;
  const qkvfuse_status st = run_named(&c, &a, be, &x, &unsupported);
  const char *msg = qkvfuse_last_error();
  tk_case_download(&c);
  download_extra(&qb);
  tk_stats ss;
  memset(&ss, 0, sizeof ss);
  if (dev->type == QKVFUSE_DEVICE_CPU) {
    if (st != QKVFUSE_ERROR_OUT_OF_RANGE || !tk_names_argument(msg, "index"))
      tk_stats_fail(&ss, "status %s (\"%s\"), want OUT_OF_RANGE naming index", qkvfuse_status_string(st), msg);
    for (int k = 0; k < TK_NSLOT; k++)
      if (c.buf[k].bytes) tk_cmp_untouched(&ss, tk_slot_name[k], c.buf[k].got, c.buf[k].init, NULL, c.buf[k].bytes);
    tk_cmp_untouched(&ss, "q_out_before_quant", qb.buf, qb.init, NULL, qb.n);
  } else {
    uint32_t flags;
    memcpy(&flags, c.buf[TK_FLAGS_BUF].got, 4);
    if (st != QKVFUSE_SUCCESS || !(flags & QKVFUSE_DATA_ERROR_SLOT))
      tk_stats_fail(&ss, "status %s, error_flags 0x%x; want success with the SLOT bit", qkvfuse_status_string(st),
                    flags);
    const int outs[3] = {TK_Q_OUT, TK_K_OUT, TK_V_OUT};
    const int64_t width[3] = {s.Nq * s.D, s.Nkv * s.D, s.Nkv * s.D};
    for (int o = 0; o < 3 && !ss.failed; o++) {
      const tk_view *w = &c.view[outs[o]];
      const int64_t es = (int64_t)tk_size(w->t.dtype);
      for (int64_t t = 0; t < s.T && !ss.failed; t++)
        for (int64_t e = 0; e < width[o]; e++) {
          const int64_t off = (w->off + tk_elem_offset(&w->t, t * width[o] + e)) * es;
          const uint8_t *got = c.buf[w->buf].got + off, *init = c.buf[w->buf].init + off, *copy = qb.buf + off;
          if (t == bad && memcmp(got, init, (size_t)es)) {
            tk_stats_fail(&ss, "%s: the dropped token's row was written", tk_slot_name[outs[o]]);
            break;
          }
          if (o == 0 && memcmp(copy, t == bad ? qb.init + off : got, (size_t)es)) {
            tk_stats_fail(&ss, "q_out_before_quant: token %lld's row %s", (long long)t,
                          t == bad ? "was written although the token was dropped" : "differs from q_out");
            break;
          }
        }
    }
  }
  checks++;
  if (ss.failed) fail("FAIL test_named %s: %s%s\n", "qkv_rmsnorm_rope_cache: rejected token", ": ", ss.first);
  free_extra(&qb);
  tk_case_free(&c);
}

/* ---- argument checks of the named entry points ---- */

typedef struct bad {
  int op;
  int mutation; /* case of bad_call's switch */
  const char *what;
  qkvfuse_status want;
  const char *names; /* the message must start with one of them (tk_names_argument) */
} bad;

static void bad_call(const bad *b) {
  int idx = b->mutation;
  tk_rng r;
  tk_rng_seed(&r, 500 + (uint64_t)b->op);
  tk_spec s;
  named_ctx x;
  do named_spec(b->op, &r, &s, &x);
  while (s.T < 4 || (b->op == OP_DEQUANT && s.in3d != 1));
  x.flag = 1;
  if (b->op != OP_SPLIT) s.k_out_dt = s.v_out_dt = s.q_out_dt;
  if (b->op == OP_SPLIT && idx == 19) s.q_beta_dt = s.k_beta_dt = s.qkv_dt; /* both betas, then q's dropped */
  if (b->op == OP_CACHE) {
    s.layout = QKVFUSE_CACHE_PAGED, x.cache_mode = "PA";
    tk_spec_fixup(&s);
  }
  tk_case c;
  tk_case_build(&c, &s, 600);
  extra_out qb = {0};
  if (b->op == OP_CACHE) x.q_before = poison_like(&c, TK_Q_OUT, tk_device_cpu(), &qb);
  switch (idx) {
    case 0: x.cache_mode = "PA_FOO"; break;
    case 1: x.head_nums[2] = x.head_nums[1] + 1; break;
    case 2: x.qkv_size[2] += 1; break;
    case 3: x.qkv_size[0] += 1; break;
    case 4: x.qkv_size[3] = s.D / 2; break;
    case 5: x.drop_k_out = 1; break;
    case 6: x.q_before = NULL; break;
    case 7: x.qkv_size_p = NULL; break;
    case 8: x.head_nums_p = NULL; break;
    case 9: x.quant_mode = "dynamic"; break;
    case 10: x.layout = "BNSD"; break;
    case 11: x.cache_mode = "paged"; break;
    case 12: x.size_splits[2] += s.D; break;
    case 13: x.size_splits[0] += 2; break;
    case 14: x.size_splits[1] -= s.D, x.size_splits[0] += s.D; break;
    case 15: x.drop_v_out = 1; break;
    case 16: x.size_splits_p = NULL; break;
    case 17: x.eps = 0; break;
    case 18: x.rope_dim = 2 * s.D; break;
    case 20: x.eps = -1; break;
    case 21: x.cache_mode = ""; break;
    case 33: x.eps = 1e-50; break;
    default: break;
  }
  tk_case_upload(&c, tk_device_cpu());
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_args(&c, TK_AT_DEVICE, tens, &a);
  if (b->op == OP_SPLIT && idx == 19) {
    /* k_bias without q_bias */
    a.q_beta = NULL;
  }
  /* q_out_before_quant (or error_flags) over another tensor of the call */
  const qkvfuse_tensor *alias[] = {a.q_gamma, a.k_gamma, a.cos, a.slot_mapping};
  if (idx >= 22 && idx <= 25) qb.t.data = alias[idx - 22]->data;
  if (idx == 26) a.error_flags = (uint32_t *)(((uintptr_t)x.q_before->data + 7) & ~(uintptr_t)3);
  qkvfuse_tensor bad_t;
  if (idx >= 27 && idx <= 32) { /* a bad view of one input, named as the caller names it */
    const qkvfuse_tensor **slot[] = {&a.q_gamma, &a.q_beta, &a.slot_mapping, &a.slot_mapping, &a.k_scale, &a.k_out};
    bad_t = **slot[idx - 27];
    if (idx == 30) bad_t.dtype = QKVFUSE_DTYPE_FLOAT32;
    else if (idx == 28) bad_t.dtype = QKVFUSE_DTYPE_INT8;
    else bad_t.shape[0] -= 1;
    *slot[idx - 27] = &bad_t;
  }
  if (idx == 34) {
    bad_t = *a.k_cache;
    bad_t.dtype = QKVFUSE_DTYPE_INT32;
    a.k_cache = &bad_t;
  }
  if (idx == 35) a.q_gamma = NULL;
  int unsupported = 0;
  qkvfuse_status st = run_named(&c, &a, QKVFUSE_BACKEND_AUTO, &x, &unsupported);
  const char *msg = qkvfuse_last_error();
  tk_stats ss;
  memset(&ss, 0, sizeof ss);
  if (st != b->want)
    tk_stats_fail(&ss, "status %s, want %s", qkvfuse_status_string(st), qkvfuse_status_string(b->want));
  else if (!tk_names_argument(msg, b->names))
    tk_stats_fail(&ss, "message does not name '%s'", b->names);
  tk_case_download(&c);
  for (int k = 0; k <= TK_NSLOT; k++)
    if (c.buf[k].bytes) tk_cmp_untouched(&ss, k < TK_NSLOT ? tk_slot_name[k] : "error_flags", c.buf[k].got, c.buf[k].init, NULL, c.buf[k].bytes);
  download_extra(&qb);
  if (qb.buf) tk_cmp_untouched(&ss, "q_out_before_quant", qb.buf, qb.init, NULL, qb.n);
  checks++;
  if (ss.failed) {
    char m2[1400];
    snprintf(m2, sizeof m2, "%s\n  message: \"%s\"", ss.first, msg);
    fail("FAIL test_named %s: bad argument '%s': %s\n", OPNAME[b->op], b->what, m2);
  }
  free_extra(&qb);
  tk_case_free(&c);
}

int main(int argc, char **argv) {
  uint64_t seed = tk_arg_u64(argc, argv, "--seed", "QKVFUSE_TEST_SEED", 0xA11CE);
  uint64_t n = tk_arg_u64(argc, argv, "--cases", NULL, 40);
  int verbose = tk_arg_has(argc, argv, "--verbose");
  qkvfuse_backend be = QKVFUSE_BACKEND_AUTO;
  if (tk_variants_from(argc, argv) != 0) return 2; /* the named operators' plans take them */
  if (tk_arg_has(argc, argv, "--backend") && !tk_backends_from(argc, argv, &be, 1)) return 2;
  if (!tk_device_for_backend(be)) return TK_SKIP;
  for (int op = OP_SPLIT; op <= OP_DEQUANT; op++)
    for (uint64_t i = 0; i < n; i++) one_case(op, tk_case_seed(seed + (uint64_t)op, i), be, verbose);
  rejected_token(be);
  if (be == QKVFUSE_BACKEND_CUDA) {
    printf("test_named[cuda]: %d random cases, %d failed\n", checks, failed);
    return failed ? 1 : 0;
  }
  static const bad BAD[] = {
      {OP_CACHE, 0, "cache_mode \"PA_FOO\"", QKVFUSE_ERROR_INVALID_VALUE, "cache_mode"},
      {OP_CACHE, 21, "cache_mode \"\"", QKVFUSE_ERROR_INVALID_VALUE, "cache_mode"},
      {OP_CACHE, 1, "head_nums Nk != Nv", QKVFUSE_ERROR_INVALID_VALUE, "head_nums"},
      {OP_CACHE, 2, "qkv_size N != Nq + Nk + Nv", QKVFUSE_ERROR_INVALID_VALUE, "qkv_size|head_nums"},
      {OP_CACHE, 3, "qkv_size B*S != rows of qkv", QKVFUSE_ERROR_SHAPE, "qkv|qkv_size"},
      {OP_CACHE, 4, "qkv_size D != the head dim", QKVFUSE_ERROR_SHAPE, "qkv|qkv_size"},
      {OP_CACHE, 5, "is_output_qkv without k_out_before_quant", QKVFUSE_ERROR_NULL_POINTER, "k_out_before_quant"},
      {OP_CACHE, 6, "is_output_qkv without q_out_before_quant", QKVFUSE_ERROR_NULL_POINTER, "q_out_before_quant"},
      {OP_CACHE, 7, "qkv_size NULL", QKVFUSE_ERROR_NULL_POINTER, "qkv_size"},
      {OP_CACHE, 8, "head_nums NULL", QKVFUSE_ERROR_NULL_POINTER, "head_nums"},
      {OP_CACHE, 20, "epsilon negative", QKVFUSE_ERROR_INVALID_VALUE, "epsilon"},
      {OP_DEQUANT, 9, "quant_mode \"dynamic\"", QKVFUSE_ERROR_INVALID_VALUE, "quant_mode"},
      {OP_DEQUANT, 10, "layout \"BNSD\"", QKVFUSE_ERROR_INVALID_VALUE, "layout"},
      {OP_DEQUANT, 11, "cache_mode \"paged\"", QKVFUSE_ERROR_INVALID_VALUE, "cache_mode"},
      {OP_DEQUANT, 12, "size_splits sum != H", QKVFUSE_ERROR_INVALID_VALUE, "size_splits"},
      {OP_DEQUANT, 13, "size_splits q not a multiple of D", QKVFUSE_ERROR_INVALID_VALUE, "size_splits"},
      {OP_DEQUANT, 14, "size_splits k != v", QKVFUSE_ERROR_INVALID_VALUE, "size_splits"},
      {OP_DEQUANT, 15, "kv_output without v_out", QKVFUSE_ERROR_NULL_POINTER, "v_out"},
      {OP_DEQUANT, 16, "size_splits NULL", QKVFUSE_ERROR_NULL_POINTER, "size_splits"},
      {OP_SPLIT, 17, "eps 0", QKVFUSE_ERROR_INVALID_VALUE, "eps"},
      /* the caller passed rope_dim; the library names the descriptor field it maps to (docs/API.md) */
      {OP_SPLIT, 18, "rope_dim > head_dim", QKVFUSE_ERROR_INVALID_VALUE, "rope_dim|rotary_dim"},
      {OP_SPLIT, 19, "k_bias without q_bias", QKVFUSE_ERROR_NULL_POINTER, "q_bias|k_bias"},
      {OP_SPLIT, 5, "k_out NULL", QKVFUSE_ERROR_NULL_POINTER, "k_out"},
      {OP_SPLIT, 15, "v_out NULL", QKVFUSE_ERROR_NULL_POINTER, "v_out"},
      /* every tensor a call writes is overlap-checked, the extra outputs and error_flags included */
      {OP_CACHE, 22, "q_out_before_quant over q_gamma", QKVFUSE_ERROR_OVERLAP, "q_out_before_quant"},
      {OP_CACHE, 23, "q_out_before_quant over k_gamma", QKVFUSE_ERROR_OVERLAP, "q_out_before_quant"},
      {OP_CACHE, 24, "q_out_before_quant over cos", QKVFUSE_ERROR_OVERLAP, "q_out_before_quant"},
      {OP_CACHE, 25, "q_out_before_quant over index", QKVFUSE_ERROR_OVERLAP, "q_out_before_quant"},
      {OP_CACHE, 26, "error_flags inside q_out_before_quant", QKVFUSE_ERROR_OVERLAP, "error_flags"},
      /* messages name the caller's own arguments */
      {OP_SPLIT, 27, "q_weight one element short", QKVFUSE_ERROR_SHAPE, "q_weight"},
      {OP_SPLIT, 35, "q_weight NULL", QKVFUSE_ERROR_NULL_POINTER, "q_weight"},
      {OP_CACHE, 29, "index one token short", QKVFUSE_ERROR_SHAPE, "index"},
      {OP_DEQUANT, 30, "indices float32", QKVFUSE_ERROR_DTYPE, "indices"},
      {OP_DEQUANT, 31, "scale_k one channel short", QKVFUSE_ERROR_SHAPE, "scale_k"},
      {OP_CACHE, 32, "k_out_before_quant one token short", QKVFUSE_ERROR_SHAPE, "k_out_before_quant"},
      {OP_CACHE, 34, "k_cache int32", QKVFUSE_ERROR_DTYPE, "k_cache"},
      {OP_CACHE, 33, "epsilon 1e-50 (0 in float32)", QKVFUSE_ERROR_INVALID_VALUE, "epsilon"},
  };
  for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) bad_call(&BAD[i]);
  printf("test_named: %d checks (%llu random cases per operator + %d bad arguments), %d failed\n", checks,
         (unsigned long long)n, (int)(sizeof BAD / sizeof BAD[0]), failed);
  return failed ? 1 : 0;
}
