// Dot products and scaled row additions on plain fp32 / fp16 arrays: the inner kernels of SnapKV
// scoring and of attention over stored rows. Each fast kernel (AVX2+FMA / F16C at the avx2 ISA
// level and up, snapkv/util/cpu.h) has a scalar twin (*_scalar) that tests hold it to; dot_ref
// accumulates in double. Nothing here allocates or knows about caches.
#pragma once

#include <cstddef>

#include "snapkv/util/fp16.h"

namespace snapkv {

// sum_i a[i] * b[i].  a, b: [n]
float dot(const float* a, const float* b, size_t n);
float dot_scalar(const float* a, const float* b, size_t n);
double dot_ref(const float* a, const float* b, size_t n);

// sum_i a[i] * fp32(b[i]).  a: [n] fp32, b: [n] binary16
float dot_f16(const float* a, const fp16_t* b, size_t n);
float dot_f16_scalar(const float* a, const fp16_t* b, size_t n);

// y[i] += alpha * x[i].  y, x: [n]
void axpy(float* y, float alpha, const float* x, size_t n);
void axpy_scalar(float* y, float alpha, const float* x, size_t n);

// y[i] += alpha * fp32(x[i]).  y: [n] fp32, x: [n] binary16
void axpy_f16(float* y, float alpha, const fp16_t* x, size_t n);
void axpy_f16_scalar(float* y, float alpha, const fp16_t* x, size_t n);

}  // namespace snapkv
