// Implements: the element types the tiled kernels of src/backends/cuda/
// (the fused attention) stage their operands in, and the conversions to
// and from fp32 (device code: included by .cu files only).
//  - float: fp32 operands, multiplied with fp32 fused multiply-adds;
//  - __nv_bfloat16: bf16 operands, on the tensor cores (--precision bf16);
//  - Tf32: an fp32 value rounded to TF32 (10 mantissa bits, to nearest,
//    ties away from zero: cvt.rna, wmma::__float_to_tf32), on the tensor
//    cores (--precision tf32). Its low 13 bits are zero, so wmma's tf32
//    fragments load it as it is.
#pragma once

#include <cuda_bf16.h>
#include <mma.h>

#include <type_traits>

namespace dptrain::cuda {

struct alignas(4) Tf32 {
  float v;
};
static_assert(sizeof(Tf32) == sizeof(float), "a Tf32 is stored as the float it holds");

template <typename E>
__device__ inline E to_elem(float x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<E, Tf32>) return Tf32{nvcuda::wmma::__float_to_tf32(x)};
  else return x;
}
template <typename E>
__device__ inline float to_float(E x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) return __bfloat162float(x);
  else if constexpr (std::is_same_v<E, Tf32>) return x.v;
  else return x;
}

}  // namespace dptrain::cuda
