/* SPDX-License-Identifier: Apache-2.0 */
/* A plain driver for a fuzz target, for compilers without libFuzzer (gcc):
 * runs the target on files and directories (a corpus), then on random inputs,
 * so the invariant checks run in every build.
 *   fuzz_X_replay [--random N] [--seed S] [--max-len L] [--write-seeds DIR] PATH...
 * --write-seeds DIR writes the random inputs there too (to start a corpus).
 * A violation aborts inside the target, after printing the input's case. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fz.h"
#include "rng.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static long run_file(const char *path) {
  FILE *fp = fopen(path, "rb");
  if (!fp) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    exit(2);
  }
  static uint8_t buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  fprintf(stderr, "%s\r", path); /* the input being run, should it fail */
  LLVMFuzzerTestOneInput(buf, n);
  return 1;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static long run_path(const char *path) {
  struct stat st;
  if (stat(path, &st)) {
    fprintf(stderr, "replay: no such path %s\n", path);
    exit(2);
  }
  if (!S_ISDIR(st.st_mode)) return run_file(path);
  DIR *d = opendir(path);
  char **names = NULL;
  size_t n = 0, cap = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) names = realloc(names, (cap = cap ? 2 * cap : 64) * sizeof *names);
    names[n] = malloc(strlen(path) + strlen(e->d_name) + 2);
    sprintf(names[n++], "%s/%s", path, e->d_name);
  }
  if (d) closedir(d);
  qsort(names, n, sizeof *names, by_name); /* a fixed order on every machine */
  long count = 0;
  for (size_t i = 0; i < n; i++) {
    count += run_path(names[i]);
    free(names[i]);
  }
  free(names);
  return count;
}

int main(int argc, char **argv) {
  long random_n = 0, files = 0;
  uint64_t seed = 1;
  size_t max_len = 256;
  const char *write_dir = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--random") && i + 1 < argc) random_n = strtol(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--max-len") && i + 1 < argc) max_len = (size_t)strtoul(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--write-seeds") && i + 1 < argc) write_dir = argv[++i];
    else files += run_path(argv[i]);
  }
  if (max_len < 16) max_len = 16;
  tk_rng r;
  tk_rng_seed(&r, seed);
  uint8_t *buf = malloc(max_len);
  for (long k = 0; k < random_n; k++) {
    size_t n = 12 + (size_t)(tk_rng_next(&r) % (max_len - 11));
    for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)tk_rng_next(&r);
    if (write_dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/seed-%04ld", write_dir, k);
      FILE *fp = fopen(path, "wb");
      if (fp) fwrite(buf, 1, n, fp), fclose(fp);
    }
    LLVMFuzzerTestOneInput(buf, n);
  }
  free(buf);
  fprintf(stderr, "\n");
  fz_print_counts(stdout);
  printf("%s: %ld corpus inputs and %ld random inputs (seed %llu) kept the invariant\n", argv[0], files, random_n,
         (unsigned long long)seed);
  return 0;
}
