// Internal: the CBLAS header of the BLAS this build links (CMakeLists.txt): OpenBLAS's <cblas.h>,
// or Apple's Accelerate framework (SNAPKV_BLAS_ACCELERATE). Promises cblas_sgemm and its enums;
// thread control is OpenBLAS's only (ops/gemm.cpp: set_blas_threads, blas_threads).
#pragma once

#if defined(SNAPKV_BLAS_ACCELERATE)
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif
