/* SPDX-License-Identifier: Apache-2.0 */
/* The named entry points under the fuzz harness: their own arguments (sizes,
 * mode strings, flags) are set from the valid case, then mutated; a call is
 * judged against the core call docs/API.md "Named operators" maps it to. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fp.h"
#include "fz.h"
#include "tview.h"

#define PICK(s, arr) ((arr)[fz_range((s), 0, (int64_t)(sizeof(arr) / sizeof((arr)[0])) - 1)])

static int64_t odd_size(fz_src *s, int64_t v) {
  static const int64_t vals[] = {0, -1, 1, 2, 16, 512, 1026, INT32_MAX, (int64_t)1 << 32, INT64_MAX, INT64_MIN};
  switch (fz_range(s, 0, 4)) { /* wrapping: the harness must not overflow itself */
    case 0: return (int64_t)((uint64_t)v - 1);
    case 1: return (int64_t)((uint64_t)v + 1);
    case 2: return (int64_t)((uint64_t)v * 2);
    default: return PICK(s, vals);
  }
}

static const char *cache_mode_of(qkvfuse_cache_layout l, fz_src *s) {
  switch (l) {
    case QKVFUSE_CACHE_NZ: return fz_chance(s, 128) ? "PA_NZ" : NULL;
    case QKVFUSE_CACHE_PAGED_HND: return "PA_BNSD";
    case QKVFUSE_CACHE_PAGED: return fz_chance(s, 128) ? "PA" : "PA_BSND";
    default: return "?";
  }
}

void fz_named_mutate(fz_call *f, fz_src *s) {
  fz_named *n = &f->named;
  const qkvfuse_desc *d = &f->c.desc;
  const tk_spec *sp = &f->c.sp;
  const int64_t D = d->head_dim;
  n->eps = d->eps;
  switch (n->op) {
    case FZ_SPLIT:
      n->q_hidden = d->num_q_heads * D, n->kv_hidden = d->num_kv_heads * D, n->head_dim = D;
      n->rope_dim = d->rotary_dim == D && fz_chance(s, 128) ? 0 : d->rotary_dim;
      n->is_neox = d->rope_style == QKVFUSE_ROPE_NEOX;
      break;
    case FZ_RMSNORM_CACHE: {
      const int first = fz_chance(s, 128);
      n->qkv_size[0] = first ? sp->T : 1, n->qkv_size[1] = first ? 1 : sp->T;
      n->qkv_size[2] = d->num_q_heads + 2 * d->num_kv_heads, n->qkv_size[3] = D;
      n->head_nums[0] = d->num_q_heads, n->head_nums[1] = n->head_nums[2] = d->num_kv_heads;
      n->cache_mode = cache_mode_of(d->cache_layout, s);
      n->is_output_qkv = f->args.k_out && f->args.v_out && f->args.q_out && f->args.k_out->dtype == f->args.q_out->dtype &&
                         fz_chance(s, 200);
      if (n->is_output_qkv) { /* q_out_before_quant: q_out's shape and dtype, in poison */
        qkvfuse_tensor *q = &n->q_copy;
        *q = *f->args.q_out;
        if (q->ndim < 0 || q->ndim > QKVFUSE_MAX_DIMS) return;
        __int128 elems = 1;
        for (int k = 0; k < q->ndim; k++) {
          if (q->shape[k] < 0) return;
          elems *= q->shape[k];
          if (elems > (1 << 20)) return; /* a mutated q_out too large to copy: pass no q_out_before_quant */
        }
        size_t es = tk_size(q->dtype) ? tk_size(q->dtype) : 1, bytes = (size_t)elems * es;
        int b = fz_buf_poison(f, bytes ? bytes : 1, 0xC0FFEE);
        if (b < 0) return;
        int64_t st = 1;
        for (int k = q->ndim - 1; k >= 0; k--) q->strides[k] = st, st *= q->shape[k] ? q->shape[k] : 1;
        q->data = f->buf[b].run;
        n->has_q_copy = 1;
      }
      break;
    }
    default: /* FZ_DEQUANT */
      n->size_splits[0] = d->num_q_heads * D, n->size_splits[1] = n->size_splits[2] = d->num_kv_heads * D;
      n->quant_mode = fz_chance(s, 128) ? "static" : NULL;
      n->layout = fz_chance(s, 128) ? "BSND" : NULL;
      n->cache_mode = d->cache_layout == QKVFUSE_CACHE_PAGED ? "page" : fz_chance(s, 128) ? "contiguous" : NULL;
      n->kv_output = f->args.k_out && f->args.v_out && fz_chance(s, 200);
      break;
  }
  fz_log(f, "named op %d\n", n->op);
  static const double epss[] = {0.0, -1e-6, NAN, INFINITY, 1e30, 1e-300, 1e-5, 1e29, 1e-50, 1e39, 1e-45};
  static const char *modes[] = {NULL, "", "PA_NZ", "PA_BNSD", "PA", "PA_BSND", "pa_nz", "page", "contiguous",
                                "static", "dynamic", "BSND", "BNSD", "PA_NZ "};
  static const int flags[] = {0, 1, 2, -1};
  const int k = (int)fz_bytes(s, 1), nops = k < 128 ? 0 : k < 220 ? 1 : 2;
  for (int i = 0; i < nops; i++) {
    const int field = (int)fz_range(s, 0, 15);
    const int j = (int)fz_range(s, 0, 3);
    switch (field) {
      case 0: n->q_hidden = odd_size(s, n->q_hidden); break;
      case 1: n->kv_hidden = odd_size(s, n->kv_hidden); break;
      case 2: n->head_dim = odd_size(s, n->head_dim); break;
      case 3: n->rope_dim = odd_size(s, n->rope_dim); break;
      case 4: n->qkv_size[j] = odd_size(s, n->qkv_size[j]); break;
      case 5: n->head_nums[j % 3] = odd_size(s, n->head_nums[j % 3]); break;
      case 6: n->size_splits[j % 3] = odd_size(s, n->size_splits[j % 3]); break;
      case 7: n->eps = PICK(s, epss); break;
      case 8: n->is_neox = PICK(s, flags); break;
      case 9: n->is_output_qkv = PICK(s, flags); break;
      case 10: n->kv_output = PICK(s, flags); break;
      case 11: n->cache_mode = PICK(s, modes); break;
      case 12: if (fz_chance(s, 128)) n->quant_mode = PICK(s, modes); else n->layout = PICK(s, modes); break;
      case 13: /* q_out_before_quant inside another tensor of the call */
      case 14: { /* or error_flags inside q_out_before_quant */
        int pres[TK_NSLOT], np = 0;
        for (int sl = 0; sl < TK_NSLOT; sl++)
          if (*tk_args_field(&f->args, sl)) pres[np++] = sl;
        if (!n->has_q_copy || !np) break;
        if (field == 14) {
          f->args.error_flags = (uint32_t *)(((uintptr_t)n->q_copy.data + 7) & ~(uintptr_t)3);
          break;
        }
        const qkvfuse_tensor *o = *tk_args_field(&f->args, pres[fz_range(s, 0, np - 1)]);
        const size_t es = tk_size(n->q_copy.dtype) ? tk_size(n->q_copy.dtype) : 1;
        void *at = (void *)((((uintptr_t)o->data + es - 1) & ~(uintptr_t)(es - 1)) + es * (uintptr_t)fz_range(s, 0, 3));
        /* only inside memory the harness owns, with room for all of it: the call may write it */
        int64_t bytes = (int64_t)es;
        for (int dim = 0; dim < n->q_copy.ndim; dim++) bytes *= n->q_copy.shape[dim];
        if (fz_buf_room(f, at) >= bytes) n->q_copy.data = at;
        break;
      }
      default: n->null_sizes = 1; break;
    }
    fz_log(f, "named #%d[%d]: sizes %lld/%lld/%lld/%lld qkv_size {%lld,%lld,%lld,%lld} heads {%lld,%lld,%lld} "
           "splits {%lld,%lld,%lld} eps %g neox %d out_qkv %d kv_out %d modes %s/%s/%s null %d\n",
           field, j, (long long)n->q_hidden, (long long)n->kv_hidden, (long long)n->head_dim, (long long)n->rope_dim,
           (long long)n->qkv_size[0], (long long)n->qkv_size[1], (long long)n->qkv_size[2], (long long)n->qkv_size[3],
           (long long)n->head_nums[0], (long long)n->head_nums[1], (long long)n->head_nums[2],
           (long long)n->size_splits[0], (long long)n->size_splits[1], (long long)n->size_splits[2], n->eps,
           n->is_neox, n->is_output_qkv, n->kv_output, n->cache_mode ? n->cache_mode : "NULL",
           n->quant_mode ? n->quant_mode : "NULL", n->layout ? n->layout : "NULL", n->null_sizes);
  }
}

/* the norm computes in float32: eps must round to a positive finite float */
static int finite_eps(double e) { return isfinite(e) && e > 0.0 && (float)e > 0.0f && isfinite((float)e); }

static qkvfuse_quant_mode quant_for(const qkvfuse_tensor *cache, const qkvfuse_tensor *offset) {
  if (!cache) return QKVFUSE_QUANT_NONE;
  if (cache->dtype == QKVFUSE_DTYPE_INT8) return offset ? QKVFUSE_QUANT_INT8_ASYM : QKVFUSE_QUANT_INT8_SYM;
  if (cache->dtype == QKVFUSE_DTYPE_FLOAT8_E4M3FN) return QKVFUSE_QUANT_FP8_E4M3;
  return QKVFUSE_QUANT_NONE;
}

static int str_is(const char *a, const char *b) { return a && !strcmp(a, b); }

qkvfuse_status fz_call_named(fz_call *f, qkvfuse_desc *desc, qkvfuse_args *o, int *ok) {
  const fz_named *n = &f->named;
  const qkvfuse_args *a = &f->args;
  const qkvfuse_desc init = QKVFUSE_DESC_INIT;
  const qkvfuse_args ainit = QKVFUSE_ARGS_INIT;
  *desc = init;
  *o = ainit;
  *ok = a->qkv != NULL;
  if (a->qkv) desc->device_type = a->qkv->device_type, desc->device_id = a->qkv->device_id;
  o->qkv = a->qkv, o->q_out = a->q_out, o->error_flags = a->error_flags;
  if (n->op != FZ_DEQUANT) { /* the dequant operator has no norm and no epsilon */
    desc->eps = (float)n->eps;
    *ok = *ok && finite_eps(n->eps);
  }
  switch (n->op) {
    case FZ_SPLIT: {
      const int64_t hd = n->head_dim;
      *ok = *ok && hd > 0 && n->q_hidden > 0 && n->q_hidden % hd == 0 && n->kv_hidden > 0 && n->kv_hidden % hd == 0 &&
            (n->rope_dim == 0 || (n->rope_dim >= 2 && n->rope_dim <= hd && n->rope_dim % 2 == 0)) &&
            (n->is_neox == 0 || n->is_neox == 1) && (a->q_beta == NULL) == (a->k_beta == NULL) && a->k_out &&
            a->v_out;
      if (*ok) {
        desc->num_q_heads = n->q_hidden / hd, desc->num_kv_heads = n->kv_hidden / hd, desc->head_dim = hd;
        desc->rotary_dim = n->rope_dim ? n->rope_dim : hd;
      }
      desc->q_norm = desc->k_norm = 1;
      desc->rope_source = QKVFUSE_ROPE_COS_SIN_CACHE;
      desc->rope_style = n->is_neox ? QKVFUSE_ROPE_NEOX : QKVFUSE_ROPE_INTERLEAVED;
      o->q_gamma = a->q_gamma, o->k_gamma = a->k_gamma, o->q_beta = a->q_beta, o->k_beta = a->k_beta;
      o->cos_sin_cache = a->cos_sin_cache, o->positions = a->positions, o->k_out = a->k_out, o->v_out = a->v_out;
      return qkvfuse_split_qkv_rmsnorm_rope(a->qkv, a->q_gamma, a->k_gamma, n->q_hidden, n->kv_hidden, n->head_dim,
                                            n->eps, a->cos_sin_cache, a->positions, n->rope_dim, a->q_beta, a->k_beta,
                                            n->is_neox, a->q_out, a->k_out, a->v_out, a->error_flags, NULL);
    }
    case FZ_RMSNORM_CACHE: {
      const int64_t *qs = n->null_sizes ? NULL : n->qkv_size, *hn = n->null_sizes ? NULL : n->head_nums;
      const char *cm = n->cache_mode;
      qkvfuse_cache_layout L = !cm || str_is(cm, "PA_NZ")            ? QKVFUSE_CACHE_NZ
                               : str_is(cm, "PA_BNSD")                ? QKVFUSE_CACHE_PAGED_HND
                               : str_is(cm, "PA") || str_is(cm, "PA_BSND") ? QKVFUSE_CACHE_PAGED
                                                                         : QKVFUSE_CACHE_NONE;
      *ok = *ok && qs && hn && qs[0] >= 0 && qs[1] >= 0 && qs[2] > 0 && qs[3] > 0 && hn[0] > 0 && hn[1] > 0 &&
            hn[1] == hn[2] && (__int128)hn[0] + hn[1] + hn[2] == qs[2] && a->qkv->ndim == 2 &&
            (__int128)a->qkv->shape[0] == (__int128)qs[0] * qs[1] &&
            (__int128)a->qkv->shape[1] == (__int128)qs[2] * qs[3] &&
            (n->is_output_qkv == 0 || n->is_output_qkv == 1) && L != QKVFUSE_CACHE_NONE;
      if (*ok) desc->num_q_heads = hn[0], desc->num_kv_heads = hn[1], desc->head_dim = desc->rotary_dim = qs[3];
      desc->cache_layout = L;
      desc->q_norm = desc->k_norm = 1;
      desc->rope_source = QKVFUSE_ROPE_COS_SIN;
      desc->k_quant = quant_for(a->k_cache, a->k_offset), desc->v_quant = quant_for(a->v_cache, a->v_offset);
      o->q_gamma = a->q_gamma, o->k_gamma = a->k_gamma, o->cos = a->cos, o->sin = a->sin;
      o->slot_mapping = a->slot_mapping, o->k_cache = a->k_cache, o->v_cache = a->v_cache;
      o->k_scale = a->k_scale, o->v_scale = a->v_scale, o->k_offset = a->k_offset, o->v_offset = a->v_offset;
      const qkvfuse_tensor *qc = n->has_q_copy ? &n->q_copy : NULL;
      if (n->is_output_qkv == 1) {
        *ok = *ok && qc && a->k_out && a->v_out;
        o->k_out = a->k_out, o->v_out = a->v_out;
      }
      return qkvfuse_qkv_rmsnorm_rope_cache(a->qkv, a->q_gamma, a->k_gamma, a->cos, a->sin, a->slot_mapping, a->q_out,
                                            a->k_cache, a->v_cache, a->k_scale, a->v_scale, a->k_offset, a->v_offset,
                                            qc, a->k_out, a->v_out, qs, hn, n->eps, cm, n->is_output_qkv,
                                            a->error_flags, NULL);
    }
    default: { /* FZ_DEQUANT */
      const int64_t *ss = n->null_sizes ? NULL : n->size_splits;
      const qkvfuse_tensor *kc = a->k_cache;
      const int64_t D = kc && kc->ndim == 4 ? kc->shape[3] : 0;
      const char *cm = n->cache_mode;
      qkvfuse_cache_layout L = !cm || str_is(cm, "contiguous") ? QKVFUSE_CACHE_CONTIGUOUS
                               : str_is(cm, "page")            ? QKVFUSE_CACHE_PAGED
                                                               : QKVFUSE_CACHE_NONE;
      *ok = *ok && D > 0 && ss && ss[0] > 0 && ss[0] % D == 0 && ss[1] > 0 && ss[1] % D == 0 && ss[2] == ss[1] &&
            (!n->quant_mode || str_is(n->quant_mode, "static")) && (!n->layout || str_is(n->layout, "BSND")) &&
            (n->kv_output == 0 || n->kv_output == 1) && L != QKVFUSE_CACHE_NONE &&
            (n->kv_output != 1 || (a->k_out && a->v_out));
      if (*ok) desc->num_q_heads = ss[0] / D, desc->num_kv_heads = ss[1] / D, desc->head_dim = desc->rotary_dim = D;
      desc->cache_layout = L;
      desc->rope_source = QKVFUSE_ROPE_COS_SIN;
      desc->k_quant = quant_for(a->k_cache, a->k_offset), desc->v_quant = quant_for(a->v_cache, a->v_offset);
      o->weight_scale = a->weight_scale, o->act_scale = a->act_scale, o->bias = a->bias;
      o->cos = a->cos, o->sin = a->sin, o->slot_mapping = a->slot_mapping, o->k_cache = a->k_cache;
      o->v_cache = a->v_cache, o->k_scale = a->k_scale, o->v_scale = a->v_scale, o->k_offset = a->k_offset;
      o->v_offset = a->v_offset;
      if (n->kv_output == 1) o->k_out = a->k_out, o->v_out = a->v_out;
      return qkvfuse_dequant_rope_quant_kvcache(a->qkv, a->cos, a->sin, a->k_cache, a->v_cache, a->slot_mapping,
                                                a->k_scale, a->v_scale, a->k_offset, a->v_offset, a->weight_scale,
                                                a->act_scale, a->bias, ss, n->quant_mode, n->layout, n->kv_output, cm,
                                                a->q_out, a->k_out, a->v_out, a->error_flags, NULL);
    }
  }
}
