/* The snapkv C ABI from C (C99): a model's caches from a config string, one prefill chunk with the
 * window's real queries, a decode step, the accounting, and an error read back as a status code
 * plus a message. Random numbers stand in for the engine's rotated K/V/Q. */
#include <snapkv/snapkv.h>
#include <stdio.h>
#include <stdlib.h>

static float* random_floats(size_t n, unsigned* state) {
  float* v = malloc(n * sizeof *v);
  size_t i;
  if (v == NULL) exit(1);
  for (i = 0; i < n; ++i) {
    *state = *state * 1103515245u + 12345u;
    v[i] = (float)((*state >> 8) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

#define CHECK(call)                                                                         \
  do {                                                                                      \
    snapkv_status st_ = (call);                                                             \
    if (st_ != SNAPKV_OK) {                                                                 \
      fprintf(stderr, "%s: %s: %s\n", #call, snapkv_status_name(st_), snapkv_last_error()); \
      return 1;                                                                             \
    }                                                                                       \
  } while (0)

int main(void) {
  const snapkv_model_dims dims = {2, 4, 2, 32}; /* layers, heads, KV heads, head_dim */
  const size_t s = 200, w = 8, d = 32;
  snapkv_caches* caches = NULL;
  snapkv_stats st;
  unsigned seed = 7;
  size_t layer, n_kept = 0;
  int64_t positions[64];
  float *k, *v, *q, *out;

  CHECK(
      snapkv_caches_create(&dims, "policy=snapkv budget=48 window=8 sinks=4 codec=kivi4", &caches));
  k = random_floats(dims.n_kv_heads * s * d, &seed); /* [n_kv_heads][S][head_dim] */
  v = random_floats(dims.n_kv_heads * s * d, &seed);
  q = random_floats(dims.n_heads * s * d, &seed); /* [n_heads][S][head_dim] */
  out = malloc(dims.n_heads * s * d * sizeof *out);
  if (out == NULL) return 1;
  for (layer = 0; layer < dims.n_layers; ++layer) {
    CHECK(snapkv_attend(caches, layer, out, q, k, v, s));
    /* q_window: here simply the first w rows of each head of another random draw */
    CHECK(snapkv_update(caches, layer, k, v, s, q, w, SNAPKV_UPDATE_AUTO));
  }
  for (layer = 0; layer < dims.n_layers; ++layer) { /* one decode step: S = 1 */
    CHECK(snapkv_attend(caches, layer, out, q, k, v, 1));
    CHECK(snapkv_update(caches, layer, k, v, 1, NULL, 0, SNAPKV_UPDATE_AUTO));
  }
  CHECK(snapkv_total_stats(caches, &st));
  CHECK(snapkv_kept_positions(caches, 0, 0, positions, 64, &n_kept));
  printf(
      "snapkv %s: seen %zu, kept %zu (first kept positions %lld %lld ...), %zu bytes, ratio %.2f\n",
      snapkv_version(), st.tokens_seen, st.tokens_kept, (long long)positions[0],
      (long long)positions[1], st.bytes_stored, st.eviction_ratio);

  /* A misuse: an error code and a message, nothing changed. */
  if (snapkv_update(caches, 9, k, v, s, NULL, 0, SNAPKV_UPDATE_AUTO) != SNAPKV_INVALID_ARGUMENT) {
    return 1;
  }
  printf("expected error: %s\n", snapkv_last_error());

  snapkv_caches_free(caches);
  free(k);
  free(v);
  free(q);
  free(out);
  return st.tokens_seen == s + 1 && st.tokens_kept == 49 && n_kept == 49 ? 0 : 1;
}
