// The public entry points of q8_dot.h: each integer dot kernel runs the active ISA level's copy
// (q8_dot_simd.cpp, q8_dot_kquants_simd.cpp, q8_act_simd.cpp: compiled once per level;
// kernels/isa.h), and each *_ref runs the scalar level's copy, compiled without SIMD flags, so the
// reference is the plain loop on every machine.
#include "kernels/q8_dot.h"

#include "kernels/registry.h"

namespace snapkv::ops_internal {
namespace {

const kernels::Q8DotKernels& q8_kernels() {
  return kernels::active().q8;
}

}  // namespace

float dot_q8_0_q8_0(const BlockQ8_0* w, const BlockQ8_0* a, size_t n) {
  return q8_kernels().q8_0(w, a, n);
}
float dot_q4_0_q8_0(const BlockQ4_0* w, const BlockQ8_0* a, size_t n) {
  return q8_kernels().q4_0(w, a, n);
}
float dot_q4_K_q8_K(const BlockQ4_K* w, const BlockQ8_K* a, size_t n) {
  return q8_kernels().q4_K(w, a, n);
}
float dot_q5_K_q8_K(const BlockQ5_K* w, const BlockQ8_K* a, size_t n) {
  return q8_kernels().q5_K(w, a, n);
}
float dot_q6_K_q8_K(const BlockQ6_K* w, const BlockQ8_K* a, size_t n) {
  return q8_kernels().q6_K(w, a, n);
}
void gemm_q8_0_q8_0(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n) {
  q8_kernels().gemm_q8_0(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q4_0_q8_0(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows, const BlockQ8_0* a,
                    size_t n_tokens, size_t n) {
  q8_kernels().gemm_q4_0(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q4_K_q8_K(float* out, size_t ldo, const BlockQ4_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n) {
  q8_kernels().gemm_q4_K(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q5_K_q8_K(float* out, size_t ldo, const BlockQ5_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n) {
  q8_kernels().gemm_q5_K(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q6_K_q8_K(float* out, size_t ldo, const BlockQ6_K* w, size_t n_rows, const BlockQ8_K* a,
                    size_t n_tokens, size_t n) {
  q8_kernels().gemm_q6_K(out, ldo, w, n_rows, a, n_tokens, n);
}
void quantize_act_q8_0(BlockQ8_0* out, const float* x, size_t n) {
  if (n % kQ8BlockSize != 0) {
    quantize_act_q8_0_ref(out, x, n);  // throws the length error
    return;
  }
  q8_kernels().quantize_q8_0(out, x, n);
}
const char* q8_dot_isa() {
  return q8_kernels().isa();
}

float dot_q8_0_q8_0_ref(const BlockQ8_0* w, const BlockQ8_0* a, size_t n) {
  return isa_scalar::dot_q8_0_q8_0_ref(w, a, n);
}
float dot_q4_0_q8_0_ref(const BlockQ4_0* w, const BlockQ8_0* a, size_t n) {
  return isa_scalar::dot_q4_0_q8_0_ref(w, a, n);
}
float dot_q4_K_q8_K_ref(const BlockQ4_K* w, const BlockQ8_K* a, size_t n) {
  return isa_scalar::dot_q4_K_q8_K_ref(w, a, n);
}
float dot_q5_K_q8_K_ref(const BlockQ5_K* w, const BlockQ8_K* a, size_t n) {
  return isa_scalar::dot_q5_K_q8_K_ref(w, a, n);
}
float dot_q6_K_q8_K_ref(const BlockQ6_K* w, const BlockQ8_K* a, size_t n) {
  return isa_scalar::dot_q6_K_q8_K_ref(w, a, n);
}

void gemm_q8_0_q8_0_ref(float* out, size_t ldo, const BlockQ8_0* w, size_t n_rows,
                        const BlockQ8_0* a, size_t n_tokens, size_t n) {
  isa_scalar::gemm_q8_0_q8_0_ref(out, ldo, w, n_rows, a, n_tokens, n);
}
void gemm_q4_0_q8_0_ref(float* out, size_t ldo, const BlockQ4_0* w, size_t n_rows,
                        const BlockQ8_0* a, size_t n_tokens, size_t n) {
  isa_scalar::gemm_q4_0_q8_0_ref(out, ldo, w, n_rows, a, n_tokens, n);
}

}  // namespace snapkv::ops_internal
