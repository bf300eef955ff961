/* SPDX-License-Identifier: Apache-2.0 */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp.h"
#include "qkvfuse_experimental.h"
#include "tview.h"

qkvfuse_status tk_run_core(tk_case *c, const qkvfuse_args *args, qkvfuse_backend be, void *ctx, int *unsupported) {
  qkvfuse_desc d = c->desc;
  d.backend = be;
  d.device_type = c->dev->type;
  d.device_id = c->dev->id;
  qkvfuse_plan *p = NULL;
  qkvfuse_status st = qkvfuse_experimental_plan_create(&d, (const char *)ctx, &p);
  if (st == QKVFUSE_ERROR_UNSUPPORTED) *unsupported = 1;
  if (st != QKVFUSE_SUCCESS) return st;
  st = qkvfuse_run(p, args, c->dev->stream);
  qkvfuse_plan_destroy(p);
  return st;
}

void tk_compare_case(tk_case *c, const tk_oracle *o, tk_stats *st) {
  qkvfuse_tensor got[TK_NSLOT];
  qkvfuse_args a;
  tk_case_args(c, TK_AT_GOT, got, &a);
  uint8_t *mask[TK_NSLOT + 1] = {0};
  for (int b = 0; b <= TK_NSLOT; b++)
    if (c->buf[b].bytes) mask[b] = (uint8_t *)calloc(c->buf[b].bytes, 1);
  int64_t QD = o->Nq * o->D, KV = o->Nkv * o->D;
  int parity = c->desc.rounding != QKVFUSE_ROUNDING_FUSED; /* rounding between stages: exempt from the norm-wise bound */
#define MASK_AT(slot) (mask[c->view[slot].buf] + c->view[slot].off * (int64_t)tk_size(c->view[slot].t.dtype))
  const uint8_t *hs = o->head_skip;
  const tk_skip sq = {o->row_skip, hs, o->D}, sk = {o->row_skip, hs ? hs + o->Nq : NULL, o->D},
                sv = {o->row_skip, hs ? hs + o->Nq + o->Nkv : NULL, o->D};
  tk_cmp_output_rows(st, "q_out", &got[TK_Q_OUT], MASK_AT(TK_Q_OUT), o->q, o->qs, o->T, QD, o->q_mid, !parity, &sq);
  if (a.k_out) tk_cmp_output_rows(st, "k_out", &got[TK_K_OUT], MASK_AT(TK_K_OUT), o->k, o->ks, o->T, KV, o->mid, !parity, &sk);
  /* v_out: v is only ever rounded after an int32 dequant (already in o->v);
   * its copy is not an output of a rounding stage (docs/API.md, and what a
   * stage-by-stage chain produces), so no intermediate dtype applies */
  if (a.v_out) tk_cmp_output_rows(st, "v_out", &got[TK_V_OUT], MASK_AT(TK_V_OUT), o->v, o->vs, o->T, KV, QKVFUSE_DTYPE_NONE, !parity, &sv);
  if (a.k_cache) tk_cmp_cache(st, "k_cache", &got[TK_K_CACHE], MASK_AT(TK_K_CACHE), o->kc_off, o->kc, o->kcs, o->T * KV, !parity);
  if (a.v_cache) tk_cmp_cache(st, "v_cache", &got[TK_V_CACHE], MASK_AT(TK_V_CACHE), o->vc_off, o->vc, o->vcs, o->T * KV, !parity);
#undef MASK_AT
  if (a.error_flags) { /* checked by the caller (tk_check_case: must be 0) */
    memset(mask[TK_FLAGS_BUF], 1, 4);
  }
  for (int b = 0; b <= TK_NSLOT; b++) {
    if (!c->buf[b].bytes) continue;
    char name[64];
    snprintf(name, sizeof name, "buffer of %s", b < TK_NSLOT ? tk_slot_name[b] : "error_flags");
    tk_cmp_untouched(st, name, c->buf[b].got, c->buf[b].init, mask[b], c->buf[b].bytes);
    free(mask[b]);
  }
}

int tk_case_oracle(tk_case *c, tk_oracle *o, char *err, size_t errlen) {
  qkvfuse_tensor host[TK_NSLOT];
  qkvfuse_args a;
  tk_case_args(c, TK_AT_INIT, host, &a);
  return tk_oracle_run(&c->desc, &a, o, err, errlen);
}

int tk_run_core_on(tk_case *c, const tk_device *dev, qkvfuse_backend be, qkvfuse_status *status) {
  *status = QKVFUSE_SUCCESS;
  if (tk_case_upload(c, dev)) return -1;
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_args(c, TK_AT_DEVICE, tens, &a);
  int unsupported = 0;
  *status = tk_run_core(c, &a, be, NULL, &unsupported);
  return tk_case_download(c) ? -1 : 0;
}

int tk_check_case(tk_case *c, qkvfuse_backend be, tk_runner run, void *ctx, tk_stats *st) {
  return tk_check_case_on(c, tk_device_for_backend(be), be, run, ctx, st);
}

int tk_check_case_on(tk_case *c, const tk_device *dev, qkvfuse_backend be, tk_runner run, void *ctx, tk_stats *st) {
  if (!dev) return TK_SKIP;
  if (tk_case_upload(c, dev)) {
    tk_stats_fail(st, "device %s: upload failed", dev->name);
    return TK_FAIL;
  }
  qkvfuse_tensor tens[TK_NSLOT];
  qkvfuse_args a;
  tk_case_args(c, TK_AT_DEVICE, tens, &a);
  int unsupported = 0;
  qkvfuse_status s = run(c, &a, be, ctx, &unsupported);
  if (unsupported && be != QKVFUSE_BACKEND_AUTO && be != QKVFUSE_BACKEND_REFERENCE) return TK_SKIP;
  if (s != QKVFUSE_SUCCESS) {
    tk_stats_fail(st, "valid call returned %s: %s", qkvfuse_status_string(s), qkvfuse_last_error());
    return TK_FAIL;
  }
  const char *le = qkvfuse_last_error();
  if (!le || le[0]) {
    tk_stats_fail(st, "qkvfuse_last_error() is \"%s\" after a successful call (want \"\")", le ? le : "(null)");
    return TK_FAIL;
  }
  if (tk_case_download(c)) {
    tk_stats_fail(st, "device %s: download failed", dev->name);
    return TK_FAIL;
  }
  tk_oracle o;
  char err[256];
  if (tk_case_oracle(c, &o, err, sizeof err)) {
    tk_stats_fail(st, "%s", err);
    return TK_FAIL;
  }
  int64_t before = st->failed;
  if (a.error_flags) {
    uint32_t f;
    memcpy(&f, c->buf[TK_FLAGS_BUF].got, 4);
    if (f != 0) tk_stats_fail(st, "error_flags = 0x%x after a valid call (want 0)", f);
  }
  tk_compare_case(c, &o, st);
  tk_oracle_free(&o);
  return st->failed > before ? TK_FAIL : TK_PASS;
}

static const char *const BACKEND_NAMES[QKVFUSE_BACKEND_COUNT] = {"auto", "reference", "cpu", "cuda"};

int tk_backend_parse(const char *name, qkvfuse_backend *out) {
  for (int i = 0; i < QKVFUSE_BACKEND_COUNT; i++)
    if (!strcmp(name, BACKEND_NAMES[i])) {
      *out = (qkvfuse_backend)i;
      return 1;
    }
  return 0;
}

const char *tk_backend_str(qkvfuse_backend b) { return (unsigned)b < QKVFUSE_BACKEND_COUNT ? BACKEND_NAMES[b] : "?"; }

static const char *arg_value(int argc, char **argv, const char *name) {
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], name)) return argv[i + 1];
  return NULL;
}

int tk_arg_has(int argc, char **argv, const char *name) {
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], name)) return 1;
  return 0;
}

tk_spec_shaper tk_shaper_from(int argc, char **argv) {
  return tk_arg_has(argc, argv, "--engine")    ? tk_spec_engine
         : tk_arg_has(argc, argv, "--append")  ? tk_spec_append
         : tk_arg_has(argc, argv, "--dequant") ? tk_spec_dequant
                                               : NULL;
}

uint64_t tk_arg_u64(int argc, char **argv, const char *name, const char *env, uint64_t def) {
  const char *v = arg_value(argc, argv, name);
  if (!v && env) v = getenv(env);
  return v ? strtoull(v, NULL, 0) : def;
}

int tk_variants_from(int argc, char **argv) {
  const char *isa = NULL;
  for (int i = 1; i + 1 < argc; i++) {
    if (strcmp(argv[i], "--variant") != 0) continue;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", argv[i + 1]);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
      char *eq = strchr(tok, '=');
      if (!eq) {
        fprintf(stderr, "--variant: expected key=value, got '%s'\n", tok);
        return -1;
      }
      *eq = '\0';
      if (qkvfuse_experimental_set(tok, eq + 1) != QKVFUSE_SUCCESS) {
        fprintf(stderr, "--variant %s=%s: %s\n", tok, eq + 1, qkvfuse_last_error());
        return -1;
      }
      if (!strcmp(tok, "cpu.isa")) isa = argv[i + 1];
    }
  }
  if (isa) { /* an ISA the CPU backend cannot plan with here: nothing to test */
    qkvfuse_desc d = QKVFUSE_DESC_INIT;
    d.num_q_heads = d.num_kv_heads = 1, d.head_dim = 64, d.backend = QKVFUSE_BACKEND_CPU;
    qkvfuse_plan *p = NULL;
    const qkvfuse_status s = qkvfuse_plan_create(&d, &p);
    if (s != QKVFUSE_SUCCESS) {
      printf("--variant %s: %s: %s, skipped\n", isa, qkvfuse_status_string(s), qkvfuse_last_error());
      exit(TK_SKIP);
    }
    printf("--variant %s: backend %s\n", isa, qkvfuse_plan_backend_name(p));
    qkvfuse_plan_destroy(p);
  }
  return 0;
}

int tk_backends_from(int argc, char **argv, qkvfuse_backend *out, int max) {
  if (tk_variants_from(argc, argv) != 0) return 0;
  const char *v = arg_value(argc, argv, "--backend");
  if (!v) v = getenv("QKVFUSE_TEST_BACKENDS");
  if (!v) v = "reference,auto";
  char buf[256];
  snprintf(buf, sizeof buf, "%s", v);
  int n = 0;
  for (char *tok = strtok(buf, ","); tok && n < max; tok = strtok(NULL, ",")) {
    if (!tk_backend_parse(tok, &out[n])) {
      fprintf(stderr, "unknown backend '%s' (reference, auto, cpu, cuda)\n", tok);
      return 0;
    }
    n++;
  }
  return n;
}

int tk_names_argument(const char *msg, const char *names) {
  for (const char *tok = names; *tok;) {
    size_t n = strcspn(tok, "|");
    if (!strncmp(msg, tok, n) && (msg[n] == ':' || msg[n] == ' ' || msg[n] == '.' || msg[n] == '[')) return 1;
    tok += n;
    if (*tok == '|') tok++;
  }
  return 0;
}
