/* SPDX-License-Identifier: Apache-2.0 */
/* Strided tensors, argument by argument (docs/API.md, "Strides"). Every
 * tensor of the base cases (and of base A with separate q, k, v) is made
 * strided alone: a vector with an element stride of 2 or 3 ([Nkv, D] scales
 * also with padded rows), a row tensor or a cache with a last-dim stride of 2.
 * Where the backend takes it (vectors: CPU plans, which copy them into the
 * call's buffer; rows and caches: reference plans) the results must match the
 * oracle; elsewhere the call must return QKVFUSE_ERROR_STRIDE with a message
 * naming the argument and leave every byte as it was. Then all of a base's
 * vectors strided at once, and the CPU call's buffer: strided vectors that
 * fill it exactly run, one that passes it alone or after the others is
 * refused naming it, and the same tensors contiguous run.
 *   test_strides [--backend reference,auto,cuda] [--verbose] */
#include <stdio.h>
#include <string.h>

#include "bases.h"
#include "harness.h"
#include "tview.h"

static int failed, passed, verbose;

/* The innermost stride of a view's dims of more than one element (1 if none). */
static int64_t inner_stride(const qkvfuse_tensor *t) {
  for (int j = t->ndim - 1; j >= 0; j--)
    if (t->shape[j] > 1) return t->strides[j];
  return 1;
}

/* 1 if the view is not row-major contiguous (dims of one element aside). */
static int noncontiguous(const qkvfuse_tensor *t) {
  int64_t expect = 1;
  for (int j = t->ndim - 1; j >= 0; j--) {
    if (t->shape[j] != 1 && t->strides[j] != expect) return 1;
    expect *= t->shape[j];
  }
  return 0;
}

/* Run case c on backend be: accept = 1: it must pass against the oracle;
 * accept = 0: QKVFUSE_ERROR_STRIDE naming one of `names` ('|'-separated),
 * nothing written. */
static void expect_run(tk_case *c, qkvfuse_backend be, int accept, const char *names, const char *what,
                       const char *mention) {
  tk_stats st;
  memset(&st, 0, sizeof st);
  char msg[1024] = "";
  if (accept) {
    const int rc = tk_check_case(c, be, tk_run_core, NULL, &st);
    if (rc == TK_SKIP) return;
  } else {
    qkvfuse_status s;
    if (tk_run_core_on(c, tk_device_for_backend(be), be, &s)) {
      tk_stats_fail(&st, "device transfer failed");
    } else {
      snprintf(msg, sizeof msg, "%s", qkvfuse_last_error() ? qkvfuse_last_error() : "(null)");
      if (s != QKVFUSE_ERROR_STRIDE)
        tk_stats_fail(&st, "status %s, want QKVFUSE_ERROR_STRIDE", qkvfuse_status_string(s));
      else if (!tk_names_argument(msg, names))
        tk_stats_fail(&st, "message does not name '%s'", names);
      else if (mention && !strstr(msg, mention))
        tk_stats_fail(&st, "message does not say \"%s\"", mention);
      for (int b = 0; b <= TK_NSLOT; b++)
        if (c->buf[b].bytes)
          tk_cmp_untouched(&st, b < TK_NSLOT ? tk_slot_name[b] : "error_flags", c->buf[b].got, c->buf[b].init, NULL,
                           c->buf[b].bytes);
    }
  }
  if (st.failed) {
    char desc[1024];
    tk_spec_describe(&c->sp, desc, sizeof desc);
    printf("FAIL test_strides backend=%s %s (%s): %s\n  message: \"%s\"\n  spec: %s\n", tk_backend_str(be), what,
           accept ? "must run" : "must be refused", st.first, msg, desc);
    failed++;
  } else {
    passed++;
    if (verbose) printf("ok   backend=%s %s: %s%s\n", tk_backend_str(be), what, accept ? "runs" : "refused: ", msg);
  }
}

/* The tensors of case c that are strided (vectors: not contiguous; rows and
 * caches: a last-dim stride other than 1) as a mask, their names in names
 * ('|'-separated), and whether backend be takes them all. */
static uint64_t strided_tensors(const tk_case *c, qkvfuse_backend be, char *names, size_t n, int *accept) {
  uint64_t m = 0;
  names[0] = '\0';
  *accept = 1;
  for (int slot = 0; slot < TK_NSLOT; slot++) {
    if (!c->view[slot].present) continue;
    const qkvfuse_tensor *t = &c->view[slot].t;
    const int vector = tk_slot_is_vector(slot);
    if (!(vector ? noncontiguous(t) : inner_stride(t) != 1)) continue;
    m |= 1ull << slot;
    *accept &= vector ? be != QKVFUSE_BACKEND_CUDA : be == QKVFUSE_BACKEND_REFERENCE;
    const size_t used = strlen(names);
    snprintf(names + used, n - used, "%s%s", used ? "|" : "", tk_slot_name[slot]);
  }
  return m;
}

/* Each present tensor of spec sp strided alone (with the tensors that share
 * its view: the input's parts and the outputs in place on them, interleaved
 * k/v caches), then all its vectors. */
static void each_tensor(const tk_spec *base, const char *base_name, qkvfuse_backend be) {
  const uint64_t present = tk_spec_present(base);
  uint64_t vectors = 0;
  for (int slot = 0; slot < TK_NSLOT; slot++) {
    if (!(present >> slot & 1)) continue;
    tk_spec sp = *base;
    sp.strided = 1ull << slot;
    tk_case c;
    if (tk_case_build(&c, &sp, 0x57D0 + (uint64_t)slot)) {
      printf("FAIL: out of memory\n");
      failed++;
      return;
    }
    char names[512], what[640];
    int accept;
    const uint64_t m = strided_tensors(&c, be, names, sizeof names, &accept);
    if (tk_slot_is_vector(slot)) vectors |= m;
    /* an in-place output's bit alone changes nothing: it takes the input's strides */
    snprintf(what, sizeof what, "base %s, %s strided: %s", base_name, tk_slot_name[slot], m ? names : "(none)");
    expect_run(&c, be, accept, names, what, NULL);
    tk_case_free(&c);
  }
  if (!vectors) return;
  /* every vector strided: the copies of the base's vectors fit the buffer */
  tk_spec sp = *base;
  sp.strided = vectors;
  char names[512] = "", what[160];
  for (int slot = 0; slot < TK_NSLOT; slot++)
    if (vectors >> slot & 1) {
      const size_t used = strlen(names);
      snprintf(names + used, sizeof names - used, "%s%s", used ? "|" : "", tk_slot_name[slot]);
    }
  snprintf(what, sizeof what, "base %s, every vector strided (%lld bytes of copies)", base_name,
           (long long)tk_spec_gather_bytes(&sp));
  tk_case c;
  if (tk_case_build(&c, &sp, 0x57DA)) return;
  expect_run(&c, be, be != QKVFUSE_BACKEND_CUDA, names, what, NULL);
  tk_case_free(&c);
}

/* The CPU call's buffer (TK_GATHER_BYTES): spec sp with the vectors `mask`
 * strided runs iff their copies fit; refused, the message names `refused`.
 * The same call with contiguous vectors always runs. */
static void buffer_case(const tk_spec *base, uint64_t mask, const char *refused, const char *what,
                        qkvfuse_backend be) {
  tk_spec sp = *base;
  sp.strided = mask;
  const int fits = tk_spec_gather_bytes(&sp) <= TK_GATHER_BYTES;
  char w[256];
  snprintf(w, sizeof w, "%s (%lld bytes of copies: %s)", what, (long long)tk_spec_gather_bytes(&sp),
           fits ? "they fit" : "too many");
  if (!fits != (refused != NULL)) {
    printf("FAIL test_strides: %s: the case does not test what it says\n", w);
    failed++;
    return;
  }
  tk_case c;
  if (tk_case_build(&c, &sp, 0x57DB)) return;
  expect_run(&c, be, fits, refused ? refused : "", w, fits ? NULL : "give");
  tk_case_free(&c);
  sp.strided = 0;
  if (tk_case_build(&c, &sp, 0x57DB)) return;
  snprintf(w, sizeof w, "%s, contiguous", what);
  expect_run(&c, be, 1, "", w, NULL);
  tk_case_free(&c);
}

static void buffer_cases(qkvfuse_backend be) {
  tk_spec sp;
  /* weight_scale [H] float32: H = 16 * 1024 fills the buffer exactly, 17 * 1024 passes it */
  tk_base_spec(TK_BASE_B, &sp);
  sp.D = sp.R = 1024, sp.Nq = 14, sp.Nkv = 1, sp.B = 1, sp.S = 2;
  tk_spec_fixup(&sp);
  buffer_case(&sp, 1ull << TK_WEIGHT_SCALE, NULL, "weight_scale of 64 KiB strided", be);
  sp.Nq = 15;
  tk_spec_fixup(&sp);
  buffer_case(&sp, 1ull << TK_WEIGHT_SCALE, "weight_scale", "weight_scale of 68 KiB strided", be);
  /* int32 positions and slots of T tokens: each fits, both do not */
  tk_base_spec(TK_BASE_A, &sp);
  sp.T = 9000, sp.Nq = sp.Nkv = 1, sp.D = 16, sp.R = 16, sp.pos_dt = QKVFUSE_DTYPE_INT32;
  sp.blocks = 0;
  tk_spec_fixup(&sp);
  buffer_case(&sp, 1ull << TK_POSITIONS, NULL, "positions of 9000 tokens strided", be);
  buffer_case(&sp, 1ull << TK_SLOT_MAPPING, NULL, "slot_mapping of 9000 tokens strided", be);
  /* validation meets positions first: slot_mapping is the one that does not fit */
  buffer_case(&sp, (1ull << TK_POSITIONS) | (1ull << TK_SLOT_MAPPING), "slot_mapping",
              "positions and slot_mapping of 9000 tokens strided", be);
}

int main(int argc, char **argv) {
  qkvfuse_backend bes[8];
  const int nbe = tk_backends_from(argc, argv, bes, 8);
  verbose = tk_arg_has(argc, argv, "--verbose");
  if (!nbe) return 2;
  static const int bases[] = {TK_BASE_A, TK_BASE_B, TK_BASE_C, TK_BASE_F, TK_BASE_P};
  static const char *const names[] = {"A", "B", "C", "F", "P"};
  int ran = 0;
  for (int b = 0; b < nbe; b++) {
    if (!tk_device_for_backend(bes[b])) {
      printf("test_strides[%s]: no device, skipped\n", tk_backend_str(bes[b]));
      continue;
    }
    ran++;
    for (int k = 0; k < 5; k++) {
      tk_spec sp;
      tk_base_spec(bases[k], &sp);
      each_tensor(&sp, names[k], bes[b]);
    }
    tk_spec sp; /* q, k and v given apart (the outputs not in place) */
    tk_base_spec(TK_BASE_A, &sp);
    sp.split_inputs = 2;
    tk_spec_fixup(&sp);
    each_tensor(&sp, "A with separate q, k, v", bes[b]);
    if (bes[b] != QKVFUSE_BACKEND_CUDA) buffer_cases(bes[b]);
  }
  printf("test_strides: %d checks passed, %d failed\n", passed, failed);
  if (failed) return 1;
  return ran ? 0 : TK_SKIP;
}
