// tessera_device.cuh: the device helpers of the CUDA C that tessera_ref renders from Tile IR.
//
// One header, two compilers. Under NVRTC/nvcc (__CUDACC__) every helper is a __device__
// function, the arithmetic of the NUM-* algorithms uses the explicitly rounded intrinsics
// (__dadd_rn, __dmul_rn, __ddiv_rn, __dsqrt_rn), so no contraction into an FMA can happen
// whatever the compile options. Under a host C++ compiler (g++ -O2 -ffp-contract=off on a
// machine with IEEE binary64 arithmetic, SSE2 on x86-64) the same functions compile with
// plain + - * / and std::sqrt, which lets the test suite check the header's bits against the
// Python interpreter without a GPU (tests/cuda/test_device_header.py). The device-only
// section (cp.async, warp shuffles, mma.sync, ldmatrix) is guarded by TSR_DEVICE; the
// narrow-format sections (the fp16/bf16/fp8 conversions, tsr_canon, 16-bit max/min and
// NUM-MATH) by TSR_NARROW_TYPES: defined here after CUDA's own headers, or by an includer
// that has declared __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2 (storage __x,
// __nv_fp8_storage_t) and __half2float, __bfloat162float, __half_as_ushort,
// __bfloat16_as_ushort, __ushort_as_half, __ushort_as_bfloat16 and the fp8 types' explicit
// float conversion before including this file (the CUDA-on-CPU twin, tessera_cpu.h).
// The normative text is docs/spec/cuda.md (CUDA-HDR-*).
//
// API (other sections may be appended at the end of this file):
//   TSR_INFF, TSR_INF                  +inf as float / double (bit patterns: NVRTC has no math.h)
//   tsr_cvt<T>(x)                      NUM-CVT conversion of a float/double (or __half,
//                                      __nv_bfloat16, fp8) into T in {double, float, __half,
//                                      __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2};
//   tsr_cvt<T, R, O>(x)                with rounding R (TSR_RNE TSR_RTZ TSR_RUP TSR_RDOWN) and
//                                      overflow O (TSR_NATIVE TSR_SATURATE): GRAPH-CAST-1
//   tsr_cvt_sr<T, O>(x, bits)          stochastic rounding with the element's 32 random bits
//   tsr_widen<T>(x)                    exact widening into float/double, NaN made canonical
//   tsr_canon(x)                       x, or the canonical quiet NaN (sign clear) of its format
//                                      if x is a NaN: double, float; under TSR_NARROW_TYPES
//                                      __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2
//   tsr_cvt_bits_{f32,f16,bf16,e4m3,e5m2}(double) -> the code of that conversion (host too)
//   tsr_max(a, b), tsr_min(a, b)       IEEE 754-2019 maximum / minimum (NaN propagates as the
//                                      canonical quiet NaN, -0 < +0); float and double
//   tsr_<fn>(x) for fn in exp expm1 log sin cos tanh erf erfc sigmoid silu gelu gelu_tanh rsqrt
//                                      NUM-MATH: double -> the f64 algorithm; float -> the f64
//                                      algorithm rounded once into f32 (accum f32); __half and
//                                      __nv_bfloat16 through f32, then tsr_cvt; NaN results are
//                                      the canonical quiet NaN
//   TSR_SWIZZLE(elem_offset, itemsize) CuTe Swizzle<3,4,3> on the byte offset, back in elements
//   tsr_philox4x32_10, tsr_random_bits, tsr_uniform_f32/_f64   NUM-RNG (see the last section)
//   device only:
//   tsr_cp_async<BYTES>(smem, gmem)    cp.async of 4, 8 (.ca) or 16 (.cg) bytes
//   tsr_cp_async_commit(), tsr_cp_async_wait<N>()
//   tsr_shfl_xor(x, offset)            __shfl_xor_sync over the full warp: float double int long
//   tsr_mma_m16n8k16_bf16(d, a, b, c)  mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32:
//   tsr_mma_m16n8k16_f16(d, a, b, c)   float d[4] = a·b + c[4]; a: 4 x u32 (8 packed 16-bit
//                                      values), b: 2 x u32, the PTX fragment layouts
//   tsr_mma_m16n8k32_e4m3 / _e5m2      the fp8 mma.sync (sm_89+; a, b: 4 and 2 x u32 of bytes)
//   tsr_ldmatrix<N, TRANS>(r, smem)    ldmatrix.sync.aligned.m8n8.xN[.trans].shared.b16 into
//                                      r[N] (N in 1, 2, 4); smem: this lane's row address
#pragma once

#if defined(__CUDACC__)
#define TSR_DEVICE 1
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#define TSR_NARROW_TYPES 1
#define TSR_INL __device__ __forceinline__
#define TSR_FN TSR_INL
#define TSR_COLD __device__ __noinline__  // rare paths, out of line (the hot path keeps its registers)
#define TSR_TABLE __device__ const
#else
#include <cmath>
#include <cstring>
#define TSR_INL inline
#define TSR_FN static inline
#define TSR_COLD static
#define TSR_TABLE static const
#endif

typedef unsigned long long tsr_u64;

// ---------------------------------------------------------------------------------------
// bits and the four rounded operations

TSR_FN tsr_u64 tsr_d2u(double x) {
#ifdef TSR_DEVICE
  return (tsr_u64)__double_as_longlong(x);
#else
  tsr_u64 u; std::memcpy(&u, &x, 8); return u;
#endif
}
TSR_FN double tsr_u2d(tsr_u64 u) {
#ifdef TSR_DEVICE
  return __longlong_as_double((long long)u);
#else
  double x; std::memcpy(&x, &u, 8); return x;
#endif
}
TSR_FN unsigned tsr_f2u(float x) {
#ifdef TSR_DEVICE
  return __float_as_uint(x);
#else
  unsigned u; std::memcpy(&u, &x, 4); return u;
#endif
}
TSR_FN float tsr_u2f(unsigned u) {
#ifdef TSR_DEVICE
  return __uint_as_float(u);
#else
  float x; std::memcpy(&x, &u, 4); return x;
#endif
}

#define TSR_INFF tsr_u2f(0x7f800000u)
#define TSR_INF tsr_u2d(0x7ff0000000000000ull)
#define TSR_NANF tsr_u2f(0x7fc00000u)               // the canonical quiet NaN (sign clear)
#define TSR_NAN tsr_u2d(0x7ff8000000000000ull)

#ifdef TSR_DEVICE
#define TSR_ADD(a, b) __dadd_rn((a), (b))
#define TSR_SUB(a, b) __dsub_rn((a), (b))
#define TSR_MUL(a, b) __dmul_rn((a), (b))
#define TSR_DIV(a, b) __ddiv_rn((a), (b))
#define TSR_SQRT(a) __dsqrt_rn(a)
#define TSR_RINT(a) rint(a)
#define TSR_FLOOR(a) floor(a)
#define TSR_TO_F32(a) __double2float_rn(a)
#else
#define TSR_ADD(a, b) ((a) + (b))
#define TSR_SUB(a, b) ((a) - (b))
#define TSR_MUL(a, b) ((a) * (b))
#define TSR_DIV(a, b) ((a) / (b))
#define TSR_SQRT(a) std::sqrt(a)
#define TSR_RINT(a) std::nearbyint(a)
#define TSR_FLOOR(a) std::floor(a)
#define TSR_TO_F32(a) ((float)(a))
#endif

TSR_FN bool tsr_isnan(double x) { return x != x; }
TSR_FN double tsr_fabs(double x) { return tsr_u2d(tsr_d2u(x) & 0x7fffffffffffffffull); }
TSR_FN double tsr_canon(double x) { return tsr_isnan(x) ? TSR_NAN : x; }
TSR_FN float tsr_canon(float x) { return x != x ? TSR_NANF : x; }
// a NUM-MATH result (f64) in the accumulation format f32: rounded once, NaN canonical
TSR_FN float tsr_math_f32(double r) { return tsr_isnan(r) ? TSR_NANF : TSR_TO_F32(r); }

// exactly 2^k for integer-valued k in [-1022, 1023]
TSR_FN double tsr_pow2(double k) { return tsr_u2d((tsr_u64)((long long)k + 1023) << 52); }
// y·2^k rounded once: (y ⊗ 2^k1) ⊗ 2^k2, k1 = floor(k/2), k2 = k − k1
TSR_FN double tsr_scale_pow2(double y, double k) {
  double k1 = TSR_FLOOR(TSR_MUL(k, 0.5));
  double k2 = TSR_SUB(k, k1);
  return TSR_MUL(TSR_MUL(y, tsr_pow2(k1)), tsr_pow2(k2));
}
// frexp of a finite nonzero x: m in [1/2, 1), x = m·2^e (exact, subnormals included)
TSR_FN double tsr_frexp(double x, int* e) {
  tsr_u64 b = tsr_d2u(x);
  int bias = 1022;
  if (((b >> 52) & 0x7ff) == 0) {  // subnormal: scale by 2^54 (exact)
    b = tsr_d2u(TSR_MUL(x, 0x1p54));
    bias += 54;
  }
  *e = (int)((b >> 52) & 0x7ff) - bias;
  return tsr_u2d((b & 0x800fffffffffffffull) | (0x3feull << 52));
}
// horner(z, c[0..n-1]): p = c[n-1]; p = p ⊗ z ⊕ c[j] for j = n-2 … 0 (NUM-MATH-1)
TSR_FN double tsr_horner(double z, const double* c, int n) {
  double p = c[n - 1];
  for (int j = n - 2; j >= 0; --j) p = TSR_ADD(TSR_MUL(p, z), c[j]);
  return p;
}

// ---------------------------------------------------------------------------------------
// NUM-MATH: the f64 algorithms of tessera_ref/numerics/xmath.py, operation by operation

#define TSR_LN2_HI 0x1.62e42fee00000p-1
#define TSR_LN2_LO 0x1.a39ef35793c76p-33
#define TSR_INV_LN2 0x1.71547652b82fep+0
#define TSR_EXP_OVERFLOW 0x1.62e42fefa39efp+9
#define TSR_EXP_UNDERFLOW -0x1.74910d52d3051p+9
#define TSR_SQRT_HALF 0x1.6a09e667f3bcdp-1

TSR_FN double tsr_log_f64(double x) {  // NUM-MATH-2
  const double lg[7] = {0x1.5555555555593p-1, 0x1.999999997fa04p-2, 0x1.2492494229359p-2, 0x1.c71c51d8e78afp-3,
                        0x1.7466496cb03dep-3, 0x1.39a09d078c69fp-3, 0x1.2f112df3e5244p-3};
  if (tsr_isnan(x) || x < 0) return TSR_NAN;
  if (x == 0) return -TSR_INF;
  if (x == TSR_INF) return TSR_INF;
  int e;
  double m = tsr_frexp(x, &e);
  if (m < TSR_SQRT_HALF) { m = TSR_MUL(m, 2.0); e -= 1; }
  double k = (double)e;
  double f = TSR_SUB(m, 1.0);
  double s = TSR_DIV(f, TSR_ADD(2.0, f));
  double z = TSR_MUL(s, s);
  double r = TSR_MUL(z, tsr_horner(z, lg, 7));
  double hfsq = TSR_MUL(TSR_MUL(0.5, f), f);
  return TSR_SUB(TSR_MUL(k, TSR_LN2_HI),
                 TSR_SUB(TSR_SUB(hfsq, TSR_ADD(TSR_MUL(s, TSR_ADD(hfsq, r)), TSR_MUL(k, TSR_LN2_LO))), f));
}

TSR_FN double tsr_exp_f64(double x) {  // NUM-MATH-3
  const double p[5] = {0x1.555555555553ep-3, -0x1.6c16c16bebd93p-9, 0x1.1566aaf25de2cp-14, -0x1.bbd41c5d26bf1p-20,
                       0x1.6376972bea4d0p-25};
  if (tsr_isnan(x)) return TSR_NAN;
  if (x > TSR_EXP_OVERFLOW) return TSR_INF;
  if (x < TSR_EXP_UNDERFLOW) return 0.0;
  double k = TSR_RINT(TSR_MUL(x, TSR_INV_LN2));
  double hi = TSR_SUB(x, TSR_MUL(k, TSR_LN2_HI));
  double lo = TSR_MUL(k, TSR_LN2_LO);
  double r = TSR_SUB(hi, lo);
  double z = TSR_MUL(r, r);
  double c = TSR_SUB(r, TSR_MUL(z, tsr_horner(z, p, 5)));
  double y = TSR_SUB(1.0, TSR_SUB(TSR_SUB(lo, TSR_DIV(TSR_MUL(r, c), TSR_SUB(2.0, c))), hi));
  return tsr_scale_pow2(y, k);
}

TSR_FN double tsr_expm1_f64(double x) {  // NUM-MATH-7
  const double q[6] = {1.0, -0x1.11111111110f4p-5, 0x1.a01a019fe5585p-10, -0x1.4ce199eaadbb7p-14,
                       0x1.0cfca86e65239p-18, -0x1.afdb76e09c32dp-23};
  if (tsr_isnan(x)) return TSR_NAN;
  if (x > TSR_EXP_OVERFLOW) return TSR_INF;
  if (x <= -0x1.3687a00000000p+5) return -1.0;
  if (tsr_fabs(x) < 0x1p-54) return x;
  double k = TSR_RINT(TSR_MUL(x, TSR_INV_LN2));
  double hi = TSR_SUB(x, TSR_MUL(k, TSR_LN2_HI));
  double lo = TSR_MUL(k, TSR_LN2_LO);
  double r = TSR_SUB(hi, lo);
  double c = TSR_SUB(TSR_SUB(hi, r), lo);
  double hfx = TSR_MUL(0.5, r);
  double hxs = TSR_MUL(r, hfx);
  double r1 = tsr_horner(hxs, q, 6);
  double t = TSR_SUB(3.0, TSR_MUL(r1, hfx));
  double e = TSR_MUL(hxs, TSR_DIV(TSR_SUB(r1, t), TSR_SUB(6.0, TSR_MUL(r, t))));
  if (k == 0.0) return TSR_SUB(r, TSR_SUB(TSR_MUL(r, e), hxs));
  e = TSR_SUB(TSR_SUB(TSR_MUL(r, TSR_SUB(e, c)), c), hxs);
  if (k == -1.0) return TSR_SUB(TSR_MUL(0.5, TSR_SUB(r, e)), 0.5);
  if (k == 1.0) {
    if (r < -0.25) return TSR_MUL(-2.0, TSR_SUB(e, TSR_ADD(r, 0.5)));
    return TSR_ADD(1.0, TSR_MUL(2.0, TSR_SUB(r, e)));
  }
  if (k <= -2.0 || k > 56.0) {
    double kc = k < -60.0 ? -60.0 : (k > 1024.0 ? 1024.0 : k);
    return TSR_SUB(tsr_scale_pow2(TSR_SUB(1.0, TSR_SUB(e, r)), kc), 1.0);
  }
  if (k < 20.0) return TSR_MUL(TSR_SUB(TSR_SUB(1.0, tsr_pow2(-k)), TSR_SUB(e, r)), tsr_pow2(k));
  return TSR_MUL(TSR_ADD(TSR_SUB(r, TSR_ADD(e, tsr_pow2(-k))), 1.0), tsr_pow2(k));
}

TSR_FN double tsr_tanh_f64(double x) {  // NUM-MATH-8
  if (tsr_isnan(x)) return TSR_NAN;
  double a = tsr_fabs(x);
  if (a < 0x1p-55) return x;
  double z;
  if (a >= 22.0) {
    z = 1.0;
  } else if (a >= 1.0) {
    double t = tsr_expm1_f64(TSR_MUL(2.0, a));
    z = TSR_SUB(1.0, TSR_DIV(2.0, TSR_ADD(t, 2.0)));
  } else {
    double t = tsr_expm1_f64(TSR_MUL(-2.0, a));
    z = TSR_DIV(-t, TSR_ADD(t, 2.0));
  }
  return x < 0 ? -z : z;
}

// erf and erfc (NUM-MATH-9): the pieces, each for the range that uses it
#define TSR_ERX 0x1.b0ac160000000p-1
TSR_FN double tsr_erf_y(double x) {  // |x| < 0.84375: P/Q in z = x²
  const double pp[5] = {0x1.06eba8214db68p-3, -0x1.4cd7d691cb913p-2, -0x1.d2a51dbd7194fp-6, -0x1.7a291236668e4p-8,
                        -0x1.8ead6120016acp-16};
  const double qq[6] = {1.0, 0x1.97779cddadc09p-2, 0x1.0a54c5536cebap-4, 0x1.4d022c4d36b0fp-8, 0x1.15dc9221c1a10p-13,
                        -0x1.09c4342a26120p-18};
  double z = TSR_MUL(x, x);
  return TSR_DIV(tsr_horner(z, pp, 5), tsr_horner(z, qq, 6));
}
TSR_FN double tsr_erf_pq(double a) {  // 0.84375 ≤ |x| < 1.25: P/Q in s = |x| − 1
  const double pa[7] = {-0x1.359b8bef77538p-9, 0x1.a8d00ad92b34dp-2, -0x1.7d240fbb8c3f1p-2, 0x1.45fca805120e4p-2,
                        -0x1.c63983d3e28ecp-4, 0x1.22a36599795ebp-5, -0x1.1bf380a96073fp-9};
  const double qa[7] = {1.0, 0x1.b3e6618eee323p-4, 0x1.14af092eb6f33p-1, 0x1.2635cd99fe9a7p-4, 0x1.02660e763351fp-3,
                        0x1.bedc26b51dd1cp-7, 0x1.88b545735151dp-7};
  double s = TSR_SUB(a, 1.0);
  return TSR_DIV(tsr_horner(s, pa, 7), tsr_horner(s, qa, 7));
}
TSR_FN double tsr_erf_q(double a) {  // 1.25 ≤ |x| < 28: erfc(|x|)
  const double ra[8] = {-0x1.43412600d6435p-7, -0x1.63416e4ba7360p-1, -0x1.51e0441b0e726p+3, -0x1.f300ae4cba38dp+5,
                        -0x1.44cb184282266p+7, -0x1.7135cebccabb2p+7, -0x1.4526557e4d2f2p+6, -0x1.3a0efc69ac25cp+3};
  const double sa[9] = {1.0, 0x1.3a6b9bd707687p+4, 0x1.1350c526ae721p+7, 0x1.b290dd58a1a71p+8, 0x1.42b1921ec2868p+9,
                        0x1.ad02157700314p+8, 0x1.b28a3ee48ae2cp+6, 0x1.a47ef8e484a93p+2, -0x1.eeff2ee749a62p-5};
  const double rb[7] = {-0x1.4341239e86f4ap-7, -0x1.993ba70c285dep-1, -0x1.1c209555f995ap+4, -0x1.4145d43c5ed98p+7,
                        -0x1.3ec881375f228p+9, -0x1.004616a2e5992p+10, -0x1.e384e9bdc383fp+8};
  const double sb[8] = {1.0, 0x1.e568b261d5190p+4, 0x1.45cae221b9f0ap+8, 0x1.802eb189d5118p+10, 0x1.8ffb7688c246ap+11,
                        0x1.3f219cedf3be6p+11, 0x1.da874e79fe763p+8, -0x1.670e242712d62p+4};
  double s = TSR_DIV(1.0, TSR_MUL(a, a));
  double rs = a < 0x1.6db6d00000000p+1 ? TSR_DIV(tsr_horner(s, ra, 8), tsr_horner(s, sa, 9))
                                       : TSR_DIV(tsr_horner(s, rb, 7), tsr_horner(s, sb, 8));
  double zc = tsr_u2d(tsr_d2u(a) & 0xffffffff00000000ull);
  double e1 = tsr_exp_f64(TSR_SUB(TSR_MUL(-zc, zc), 0.5625));
  double e2 = tsr_exp_f64(TSR_ADD(TSR_MUL(TSR_SUB(zc, a), TSR_ADD(zc, a)), rs));
  return TSR_DIV(TSR_MUL(e1, e2), a);
}

TSR_FN double tsr_erf_f64(double x) {
  if (tsr_isnan(x)) return TSR_NAN;
  double a = tsr_fabs(x);
  bool neg = x < 0;
  if (a < 0x1p-28) {
    if (a < 0x1p-1022) return TSR_MUL(0.125, TSR_ADD(TSR_MUL(8.0, x), TSR_MUL(0x1.06eba8214db69p+0, x)));
    return TSR_ADD(x, TSR_MUL(0x1.06eba8214db69p-3, x));
  }
  if (a < 0.84375) return TSR_ADD(x, TSR_MUL(x, tsr_erf_y(x)));
  if (a < 1.25) {
    double pq = tsr_erf_pq(a);
    return neg ? TSR_SUB(-TSR_ERX, pq) : TSR_ADD(TSR_ERX, pq);
  }
  if (a < 6.0) {
    double q = tsr_erf_q(a);
    return neg ? TSR_SUB(q, 1.0) : TSR_SUB(1.0, q);
  }
  return neg ? -1.0 : 1.0;
}

TSR_FN double tsr_erfc_f64(double x) {
  if (tsr_isnan(x)) return TSR_NAN;
  if (x >= 28.0) return 0.0;
  if (x <= -6.0) return 2.0;
  double a = tsr_fabs(x);
  bool neg = x < 0;
  if (a < 0x1p-56) return TSR_SUB(1.0, x);
  if (a < 0.84375) {
    double y = tsr_erf_y(x);
    if (x < 0.25) return TSR_SUB(1.0, TSR_ADD(x, TSR_MUL(x, y)));
    return TSR_SUB(0.5, TSR_ADD(TSR_MUL(x, y), TSR_SUB(x, 0.5)));
  }
  if (a < 1.25) {
    double pq = tsr_erf_pq(a);
    return neg ? TSR_ADD(1.0, TSR_ADD(TSR_ERX, pq)) : TSR_SUB(TSR_SUB(1.0, TSR_ERX), pq);
  }
  double q = tsr_erf_q(a);
  return neg ? TSR_SUB(2.0, q) : q;
}

TSR_FN double tsr_sigmoid_f64(double x) {  // NUM-MATH-10
  if (x >= 0) return TSR_DIV(1.0, TSR_ADD(1.0, tsr_exp_f64(-x)));
  double e = tsr_exp_f64(x);
  return TSR_DIV(e, TSR_ADD(1.0, e));
}
TSR_FN double tsr_silu_f64(double x) { return x == -TSR_INF ? -0.0 : TSR_MUL(x, tsr_sigmoid_f64(x)); }
TSR_FN double tsr_rsqrt_f64(double x) { return TSR_DIV(1.0, TSR_SQRT(x)); }  // NUM-MATH-11
TSR_FN double tsr_gelu_f64(double x) {  // NUM-MATH-13
  return x == -TSR_INF ? -0.0 : TSR_MUL(TSR_MUL(0.5, x), tsr_erfc_f64(-TSR_MUL(x, TSR_SQRT_HALF)));
}
TSR_FN double tsr_gelu_tanh_f64(double x) {
  if (x == -TSR_INF) return -0.0;
  double v = TSR_ADD(x, TSR_MUL(0x1.6e4e26d4801f7p-5, TSR_MUL(TSR_MUL(x, x), x)));
  return TSR_MUL(x, tsr_sigmoid_f64(TSR_MUL(0x1.9884533d43651p+0, v)));
}

TSR_FN double tsr_pow_f64(double x, double y) {  // NUM-MATH-12: the first matching rule
  if (y == 0.0 || x == 1.0) return 1.0;
  if (tsr_isnan(x) || tsr_isnan(y)) return TSR_NAN;
  double ax = tsr_fabs(x);
  if (tsr_fabs(y) == TSR_INF) return ax == 1.0 ? 1.0 : ((ax < 1.0) == (y > 0.0) ? 0.0 : TSR_INF);
  bool yint = TSR_FLOOR(y) == y;  // y is finite from here
  double hy = TSR_MUL(y, 0.5);
  bool yodd = yint && TSR_FLOOR(hy) != hy;
  if (x == 0.0) {
    if (y < 0.0) return yodd ? tsr_u2d(tsr_d2u(TSR_INF) | (tsr_d2u(x) & 0x8000000000000000ull)) : TSR_INF;
    return yodd ? x : 0.0;
  }
  if (x == -TSR_INF) return y < 0.0 ? (yodd ? -0.0 : 0.0) : (yodd ? -TSR_INF : TSR_INF);
  if (x == TSR_INF) return y < 0.0 ? 0.0 : TSR_INF;
  if (x < 0.0 && !yint) return TSR_NAN;
  double r = tsr_exp_f64(TSR_MUL(y, tsr_log_f64(ax)));
  return x < 0.0 && yodd ? -r : r;
}

// sin and cos in radians (NUM-MATH-6). Beyond CW_MAX the reduction is exact: with
// K = floor(π/2·2^1600) (TSR_PIO2_K, 32-bit limbs, least significant first),
// k = nearest integer of x·2^1600/K and ρ = x − k·K·2^-1600, computed as (x·2^1600) mod 4K by
// doubling (k mod 4 is the quotient of that remainder by K); hi = RN(ρ), lo = RN(ρ − hi).
#define TSR_NL 52
TSR_TABLE unsigned TSR_PIO2_K[TSR_NL] = {
    0xd80f451fu, 0x364f0745u, 0x301d0c07u, 0xc73cee58u, 0x5c6d9c77u, 0x6520bc8cu, 0x943042f8u, 0xe2e8d811u,
    0x95793009u, 0xce186a9cu, 0xe12d2cdau, 0x3daa520eu, 0x410aa577u, 0x38c5e6acu, 0xb9475b2cu, 0x06caba47u,
    0xfa499ebfu, 0xd22c7f51u, 0x38aba734u, 0x31b4906cu, 0x42c77e0bu, 0x8400f971u, 0xd9c8b67bu, 0x9250cca3u,
    0xf8963fccu, 0x5d3e4822u, 0xb5133f4bu, 0xdc70d7f6u, 0xe80d6fdbu, 0x17feb96du, 0x4c6fdad6u, 0xe89885d3u,
    0xc4bcfd8du, 0xc90b6aecu, 0xdaa3848bu, 0x9fc26adau, 0xe4be286eu, 0x605614dbu, 0x9a748636u, 0xdf2a3367u,
    0x1c6809bbu, 0xa29410f3u, 0x76273644u, 0x04177d4cu, 0x14cf98e8u, 0x52049c11u, 0x01b839a2u, 0x898cc517u,
    0x42d18469u, 0x921fb544u, 0x00000001u, 0x00000000u};

TSR_FN int tsr_mp_cmp(const unsigned* a, const unsigned* b, int shift2) {  // sign of a − b·2^shift2 (shift2 0 or 2)
  for (int i = TSR_NL - 1; i >= 0; --i) {
    unsigned bi = shift2 ? (b[i] << 2) | (i ? b[i - 1] >> 30 : 0u) : b[i];
    if (a[i] != bi) return a[i] > bi ? 1 : -1;
  }
  return 0;
}
TSR_FN void tsr_mp_sub(unsigned* a, const unsigned* b, int shift2) {  // a −= b·2^shift2
  tsr_u64 borrow = 0;
  for (int i = 0; i < TSR_NL; ++i) {
    unsigned bi = shift2 ? (b[i] << 2) | (i ? b[i - 1] >> 30 : 0u) : b[i];
    tsr_u64 d = (tsr_u64)a[i] - bi - borrow;
    a[i] = (unsigned)d;
    borrow = (d >> 63) & 1;
  }
}
TSR_FN void tsr_mp_set_bits(unsigned* a, tsr_u64 m, int at) {  // a = m·2^at
  for (int i = 0; i < TSR_NL; ++i) a[i] = 0;
  for (int i = 0; i < 64; ++i)
    if ((m >> i) & 1) a[(at + i) >> 5] |= 1u << ((at + i) & 31);
}
TSR_FN int tsr_mp_top(const unsigned* a) {  // index of the highest set bit, −1 for 0
  for (int i = TSR_NL - 1; i >= 0; --i)
    for (int j = 31; j >= 0; --j)
      if ((a[i] >> j) & 1) return 32 * i + j;
  return -1;
}
TSR_FN int tsr_mp_bit(const unsigned* a, int i) { return i < 0 ? 0 : (int)((a[i >> 5] >> (i & 31)) & 1); }
// RN(a·2^-1600) as (mantissa, exponent of its last bit); a must have at least 53 bits
TSR_FN tsr_u64 tsr_mp_round(const unsigned* a, int* last) {
  int t = tsr_mp_top(a);
  tsr_u64 m = 0;
  for (int i = t; i > t - 53; --i) m = (m << 1) | (tsr_u64)tsr_mp_bit(a, i);
  int half = tsr_mp_bit(a, t - 53), sticky = 0;
  for (int i = t - 54; i >= 0 && !sticky; --i) sticky = tsr_mp_bit(a, i);
  *last = t - 52;
  if (half && (sticky || (m & 1))) {
    m += 1;
    if (m >> 53) { m >>= 1; *last += 1; }
  }
  return m;
}
TSR_FN double tsr_mp_double(tsr_u64 m, int last) {  // m·2^(last − 1600), m in [2^52, 2^53), normal
  return tsr_u2d(((tsr_u64)(last - 1600 + 52 + 1023) << 52) | (m & 0xfffffffffffffull));
}

TSR_COLD int tsr_reduce_exact(double x, double* hi, double* lo) {  // x finite, |x| > CW_MAX: k mod 4
  tsr_u64 b = tsr_d2u(x);
  tsr_u64 m = (b & 0xfffffffffffffull) | (1ull << 52);
  int s = (int)((b >> 52) & 0x7ff) - 1075 + 1600;  // |x|·2^1600 = m·2^s
  int s0 = s < 1548 ? s : 1548;                     // m·2^1548 < 4K: no reduction needed yet
  unsigned r[TSR_NL];
  tsr_mp_set_bits(r, m, s0);
  for (int i = s0; i < s; ++i) {  // r = 2r mod 4K
    unsigned carry = 0;
    for (int j = 0; j < TSR_NL; ++j) {
      unsigned next = r[j] >> 31;
      r[j] = (r[j] << 1) | carry;
      carry = next;
    }
    if (tsr_mp_cmp(r, TSR_PIO2_K, 2) >= 0) tsr_mp_sub(r, TSR_PIO2_K, 2);
  }
  int q = 0;
  while (tsr_mp_cmp(r, TSR_PIO2_K, 0) >= 0) { tsr_mp_sub(r, TSR_PIO2_K, 0); ++q; }
  bool neg = false;  // nearest integer: 2r > K (K is odd: no ties) -> k + 1, ρ = −(K − r)
  unsigned twice[TSR_NL];
  for (int j = 0; j < TSR_NL; ++j) twice[j] = (r[j] << 1) | (j ? r[j - 1] >> 31 : 0u);
  if (tsr_mp_cmp(twice, TSR_PIO2_K, 0) > 0) {
    unsigned kk[TSR_NL];
    for (int j = 0; j < TSR_NL; ++j) kk[j] = TSR_PIO2_K[j];
    tsr_mp_sub(kk, r, 0);
    for (int j = 0; j < TSR_NL; ++j) r[j] = kk[j];
    q += 1;
    neg = true;
  }
  int last;
  tsr_u64 hm = tsr_mp_round(r, &last);
  double h = tsr_mp_double(hm, last);
  unsigned hb[TSR_NL];
  tsr_mp_set_bits(hb, hm, last);
  double l = 0.0;
  int c = tsr_mp_cmp(r, hb, 0);
  if (c != 0) {  // lo = RN(r − hm·2^last), of either sign
    unsigned* big = c > 0 ? r : hb;
    tsr_mp_sub(big, c > 0 ? hb : r, 0);
    int llast;
    tsr_u64 lm = tsr_mp_round(big, &llast);
    l = tsr_mp_double(lm, llast);
    if (c < 0) l = -l;
  }
  if (neg) { h = -h; l = -l; }
  if (x < 0) { h = -h; l = -l; q = -q; }
  *hi = h;
  *lo = l == 0.0 ? 0.0 : l;
  return q & 3;
}

TSR_FN double tsr_two_sum(double a, double b, double* e) {
  double s = TSR_ADD(a, b);
  double bb = TSR_SUB(s, a);
  *e = TSR_ADD(TSR_SUB(a, TSR_SUB(s, bb)), TSR_SUB(b, bb));
  return s;
}

TSR_FN double tsr_sincos_f64(double x, bool want_cos) {
  const double sin_c[8] = {-0x1.4abbce625be53p-1, 0x1.466bc6775aae2p-4, -0x1.32d2cce62bd86p-8, 0x1.50783487ee782p-13,
                           -0x1.e3074fde8871fp-19, 0x1.e8f434d018d63p-25, -0x1.6fadb9f155744p-31, 0x1.aaec32af93359p-38};
  const double cos_c[7] = {0x1.03c1f081b5ac4p-2, -0x1.55d3c7e3cbffap-6, 0x1.e1f506891babbp-11, -0x1.a6d1f2a204a8cp-16,
                           0x1.f9d38a3763cc3p-22, -0x1.b6e24f44b128fp-28, 0x1.20c62c2f2d7f5p-34};
  const double inv_pio2 = 0x1.45f306dc9c883p-1;
  if (tsr_isnan(x) || tsr_fabs(x) == TSR_INF) return TSR_NAN;
  if (x == 0.0) return want_cos ? 1.0 : x;
  double hi, lo;
  int q;
  if (tsr_fabs(x) > 0x1.921fb54442d18p+20) {
    q = tsr_reduce_exact(x, &hi, &lo);
  } else {  // Cody–Waite with a 3-part π/2
    double k = TSR_RINT(TSR_MUL(x, inv_pio2));
    double a = TSR_SUB(x, TSR_MUL(k, 0x1.921fb54400000p+0));
    double e1, e2;
    double s1 = tsr_two_sum(a, -TSR_MUL(k, 0x1.0b4611a600000p-34), &e1);
    double s2 = tsr_two_sum(s1, -TSR_MUL(k, 0x1.3198a2e000000p-69), &e2);
    lo = TSR_SUB(TSR_ADD(e1, e2), TSR_MUL(k, 0x1.b839a252049c1p-104));
    hi = TSR_ADD(s2, lo);
    lo = TSR_SUB(lo, TSR_SUB(hi, s2));
    q = (int)((long long)k & 3);
  }
  double hz = TSR_MUL(0.5, TSR_MUL(hi, hi));
  double u = TSR_MUL(hi, inv_pio2);
  double z = TSR_MUL(u, u);
  double s = TSR_ADD(hi, TSR_ADD(TSR_MUL(TSR_MUL(u, z), tsr_horner(z, sin_c, 8)), TSR_MUL(lo, TSR_SUB(1.0, hz))));
  double v = TSR_SUB(1.0, hz);
  double c = TSR_ADD(v, TSR_ADD(TSR_SUB(TSR_SUB(1.0, v), hz),
                                TSR_SUB(TSR_MUL(TSR_MUL(z, z), tsr_horner(z, cos_c, 7)), TSR_MUL(hi, lo))));
  if (want_cos) return q == 0 ? c : q == 1 ? -s : q == 2 ? -c : s;
  return q == 0 ? s : q == 1 ? c : q == 2 ? -s : -c;
}
TSR_FN double tsr_sin_f64(double x) { return tsr_sincos_f64(x, false); }
TSR_FN double tsr_cos_f64(double x) { return tsr_sincos_f64(x, true); }

// The entry points the renderer calls: f64 in f64, f32 through f64 rounded once into f32.
#define TSR_MATH(fn)                                                           \
  TSR_FN double tsr_##fn(double x) { return tsr_canon(tsr_##fn##_f64(x)); }    \
  TSR_FN float tsr_##fn(float x) { return tsr_math_f32(tsr_##fn##_f64((double)x)); }
TSR_MATH(exp)
TSR_MATH(expm1)
TSR_MATH(log)
TSR_MATH(sin)
TSR_MATH(cos)
TSR_MATH(tanh)
TSR_MATH(erf)
TSR_MATH(erfc)
TSR_MATH(sigmoid)
TSR_MATH(silu)
TSR_MATH(gelu)
TSR_MATH(gelu_tanh)
TSR_MATH(rsqrt)
TSR_FN double tsr_pow(double x, double y) { return tsr_canon(tsr_pow_f64(x, y)); }
TSR_FN float tsr_pow(float x, float y) { return tsr_math_f32(tsr_pow_f64((double)x, (double)y)); }
#undef TSR_MATH

// ---------------------------------------------------------------------------------------
// IEEE 754-2019 maximum / minimum: NaN if an operand is NaN (canonical), −0 < +0

#define TSR_EXTREMES(F, NAN_, SIGN)                                             \
  TSR_FN F tsr_max(F a, F b) {                                                  \
    if (a != a || b != b) return NAN_;                                          \
    if (a == b) return SIGN(a) ? b : a;                                         \
    return a > b ? a : b;                                                       \
  }                                                                             \
  TSR_FN F tsr_min(F a, F b) {                                                  \
    if (a != a || b != b) return NAN_;                                          \
    if (a == b) return SIGN(a) ? a : b;                                         \
    return a < b ? a : b;                                                       \
  }
#define TSR_SIGN_D(x) (tsr_d2u(x) >> 63)
#define TSR_SIGN_F(x) (tsr_f2u(x) >> 31)
TSR_EXTREMES(double, TSR_NAN, TSR_SIGN_D)
TSR_EXTREMES(float, TSR_NANF, TSR_SIGN_F)
#undef TSR_EXTREMES
#undef TSR_SIGN_D
#undef TSR_SIGN_F

// ---------------------------------------------------------------------------------------
// NUM-CVT (GRAPH-CAST-1's number -> format rule): one integer encoder from an exact double,
// with the rounding modes rne rtz rup rdown and stochastic (NUM-CVT-2/5) and the overflow
// modes native and saturate (NUM-CVT-3); NaN -> the format's canonical quiet NaN with the
// source's sign (NUM-CVT-4; CUDA's own conversions differ on NaN inputs, see render.HEADER).

#define TSR_RNE 0
#define TSR_RTZ 1
#define TSR_RUP 2
#define TSR_RDOWN 3
#define TSR_RSTOCH 4
#define TSR_NATIVE 0
#define TSR_SATURATE 1

// Whether n + rest/2^shift (0 <= rest < 2^shift; shift >= 64: n = 0, rest = the whole
// mantissa, below half a quantum) moves one quantum away from zero. Stochastic: up iff
// rbits < frac·2^32, i.e. rbits < ceil(rest·2^32 / 2^shift), in integers.
TSR_FN bool tsr_round_up(tsr_u64 n, tsr_u64 rest, int shift, bool neg, int rounding, unsigned rbits) {
  if (rest == 0) return false;
  bool big = shift >= 64;
  tsr_u64 half = big ? 0ull : 1ull << (shift - 1);
  switch (rounding) {
    case TSR_RNE: return !big && (rest > half || (rest == half && (n & 1)));
    case TSR_RTZ: return false;
    case TSR_RUP: return !neg;
    case TSR_RDOWN: return neg;
    default: {
      tsr_u64 limit;
      if (shift <= 32) {
        limit = rest << (32 - shift);
      } else {
        int s = shift - 32;
        limit = s >= 64 ? 1ull : (rest >> s) + ((rest & ((1ull << s) - 1)) != 0);
      }
      return (tsr_u64)rbits < limit;
    }
  }
}

// The code of x in a format of `man` mantissa bits, exponent bias `bias` and `bits` bits:
// `max_code` its largest finite magnitude, `over_code` its native overflow (inf, or the NaN
// of a format without inf), `nan_code` its canonical quiet NaN (magnitudes, sign clear).
// Overflow: saturate, or a directed rounding toward zero, gives max_code; an inf input gives
// over_code (max_code when saturating).
TSR_FN tsr_u64 tsr_encode_mode(double x, int man, int bias, tsr_u64 max_code, tsr_u64 over_code, tsr_u64 nan_code,
                               int bits, int rounding, int overflow, unsigned rbits) {
  tsr_u64 b = tsr_d2u(x);
  bool neg = (b >> 63) != 0;
  tsr_u64 sign = neg ? 1ull << (bits - 1) : 0ull;
  int ex = (int)((b >> 52) & 0x7ff);
  tsr_u64 fr = b & 0xfffffffffffffull;
  if (ex == 0x7ff) return (fr ? nan_code : overflow == TSR_SATURATE ? max_code : over_code) | sign;
  if (ex == 0 && fr == 0) return sign;
  tsr_u64 mant = ex ? fr | (1ull << 52) : fr;
  int e2 = ex ? ex - 1075 : -1074;  // |x| = mant·2^e2
  int lg = e2 + 52;                 // floor(log2 |x|)
  if (!ex) for (lg = e2 + 51; !((fr >> (lg + 1074)) & 1); --lg) {}
  int emin = 1 - bias;
  int qexp = (lg > emin ? lg : emin) - man;  // the quantum of the result
  int shift = qexp - e2;                     // > 0 for every narrower format
  tsr_u64 n = shift >= 64 ? 0ull : mant >> shift;
  tsr_u64 rest = shift >= 64 ? mant : mant & ((1ull << shift) - 1);
  if (tsr_round_up(n, rest, shift, neg, rounding, rbits)) n += 1;
  if (n == 0) return sign;
  // n·2^qexp; a subnormal (qexp = emin − man, n < 2^man) gets n, a carry to 2^(man+1) the next
  // exponent, both by the same formula
  tsr_u64 code = ((tsr_u64)(qexp + man + bias) << man) + n - (1ull << man);
  bool toward_zero = rounding == TSR_RTZ || (rounding == TSR_RUP && neg) || (rounding == TSR_RDOWN && !neg);
  if (code > max_code) code = overflow == TSR_SATURATE || toward_zero ? max_code : over_code;
  return code | sign;
}
TSR_FN tsr_u64 tsr_encode(double x, int man, int bias, tsr_u64 max_code, tsr_u64 over_code, tsr_u64 nan_code,
                          int bits) {
  return tsr_encode_mode(x, man, bias, max_code, over_code, nan_code, bits, TSR_RNE, TSR_NATIVE, 0u);
}

// The target formats' encoders (mantissa bits, bias, width, largest finite, native overflow, NaN).
template <class T> struct tsr_fmt;
#define TSR_FMT(T, MAN, BIAS, BITS, MAX, OVER, NAN_)                                                   \
  template <> struct tsr_fmt<T> {                                                                     \
    static TSR_INL tsr_u64 code(double x, int r, int o, unsigned rb) {                                \
      return tsr_encode_mode(x, MAN, BIAS, MAX, OVER, NAN_, BITS, r, o, rb);                          \
    }                                                                                                 \
  };
TSR_FMT(float, 23, 127, 32, 0x7f7fffffull, 0x7f800000ull, 0x7fc00000ull)
struct tsr_f16_tag; struct tsr_bf16_tag; struct tsr_e4m3_tag; struct tsr_e5m2_tag;  // host names of the narrow formats
TSR_FMT(tsr_f16_tag, 10, 15, 16, 0x7bffull, 0x7c00ull, 0x7e00ull)
TSR_FMT(tsr_bf16_tag, 7, 127, 16, 0x7f7full, 0x7f80ull, 0x7fc0ull)
TSR_FMT(tsr_e4m3_tag, 3, 7, 8, 0x7eull, 0x7full, 0x7full)
TSR_FMT(tsr_e5m2_tag, 2, 15, 8, 0x7bull, 0x7cull, 0x7eull)
#undef TSR_FMT

TSR_FN tsr_u64 tsr_cvt_bits_f32(double x) { return tsr_fmt<float>::code(x, TSR_RNE, TSR_NATIVE, 0u); }
TSR_FN tsr_u64 tsr_cvt_bits_f16(double x) { return tsr_fmt<tsr_f16_tag>::code(x, TSR_RNE, TSR_NATIVE, 0u); }
TSR_FN tsr_u64 tsr_cvt_bits_bf16(double x) { return tsr_fmt<tsr_bf16_tag>::code(x, TSR_RNE, TSR_NATIVE, 0u); }
TSR_FN tsr_u64 tsr_cvt_bits_e4m3(double x) { return tsr_fmt<tsr_e4m3_tag>::code(x, TSR_RNE, TSR_NATIVE, 0u); }
TSR_FN tsr_u64 tsr_cvt_bits_e5m2(double x) { return tsr_fmt<tsr_e5m2_tag>::code(x, TSR_RNE, TSR_NATIVE, 0u); }
// a double's own format: the identity but for NaN (the canonical quiet NaN with its sign)
// and, saturating, inf (the largest finite value with its sign)
TSR_FN tsr_u64 tsr_cvt_bits_f64(double x, int overflow = TSR_NATIVE) {
  tsr_u64 b = tsr_d2u(x), sign = b & 0x8000000000000000ull;
  if (tsr_isnan(x)) return sign | 0x7ff8000000000000ull;
  if (overflow == TSR_SATURATE && (b & 0x7fffffffffffffffull) == 0x7ff0000000000000ull) return sign | 0x7fefffffffffffffull;
  return b;
}

// tsr_cvt<T, R, O>(x): x into T with rounding R and overflow O (defaults: rne, native)
template <class T> struct tsr_cvt_to;
template <> struct tsr_cvt_to<double> {
  template <int R, int O> static TSR_INL double from(double x, unsigned) { return tsr_u2d(tsr_cvt_bits_f64(x, O)); }
};
template <> struct tsr_cvt_to<float> {
  template <int R, int O> static TSR_INL float from(double x, unsigned rb) {
    return tsr_u2f((unsigned)tsr_fmt<float>::code(x, R, O, rb));
  }
};
#ifdef TSR_NARROW_TYPES
template <> struct tsr_cvt_to<__half> {
  template <int R, int O> static TSR_INL __half from(double x, unsigned rb) {
    return __ushort_as_half((unsigned short)tsr_fmt<tsr_f16_tag>::code(x, R, O, rb));
  }
};
template <> struct tsr_cvt_to<__nv_bfloat16> {
  template <int R, int O> static TSR_INL __nv_bfloat16 from(double x, unsigned rb) {
    return __ushort_as_bfloat16((unsigned short)tsr_fmt<tsr_bf16_tag>::code(x, R, O, rb));
  }
};
template <> struct tsr_cvt_to<__nv_fp8_e4m3> {
  template <int R, int O> static TSR_INL __nv_fp8_e4m3 from(double x, unsigned rb) {
    __nv_fp8_e4m3 r;
    r.__x = (__nv_fp8_storage_t)tsr_fmt<tsr_e4m3_tag>::code(x, R, O, rb);
    return r;
  }
};
template <> struct tsr_cvt_to<__nv_fp8_e5m2> {
  template <int R, int O> static TSR_INL __nv_fp8_e5m2 from(double x, unsigned rb) {
    __nv_fp8_e5m2 r;
    r.__x = (__nv_fp8_storage_t)tsr_fmt<tsr_e5m2_tag>::code(x, R, O, rb);
    return r;
  }
};
#endif
#define TSR_NAN_NEG tsr_u2d(0xfff8000000000000ull)
// A NaN source is handed on by its sign bit (read from its code: the hardware's NaN
// conversions do not promise to keep it); every other value widens exactly into double.
template <class T, int R = TSR_RNE, int O = TSR_NATIVE> TSR_FN T tsr_cvt(double x) {
  return tsr_cvt_to<T>::template from<R, O>(x, 0u);
}
template <class T, int R = TSR_RNE, int O = TSR_NATIVE> TSR_FN T tsr_cvt(float x) {
  unsigned b = tsr_f2u(x);
  return tsr_cvt<T, R, O>((b & 0x7fffffffu) > 0x7f800000u ? (b >> 31 ? TSR_NAN_NEG : TSR_NAN) : (double)x);
}
// stochastic rounding with this element's 32 random bits (NUM-CVT-5, NUM-RNG-4)
template <class T, int O = TSR_NATIVE> TSR_FN T tsr_cvt_sr(double x, unsigned rbits) {
  return tsr_cvt_to<T>::template from<TSR_RSTOCH, O>(x, rbits);
}
template <class T, int O = TSR_NATIVE> TSR_FN T tsr_cvt_sr(float x, unsigned rbits) {
  unsigned b = tsr_f2u(x);
  return tsr_cvt_sr<T, O>((b & 0x7fffffffu) > 0x7f800000u ? (b >> 31 ? TSR_NAN_NEG : TSR_NAN) : (double)x, rbits);
}
// An exact widening into float or double (every source value is a target value): a plain
// conversion but for NaN, which becomes the canonical quiet NaN with the source's sign.
template <class T> TSR_FN T tsr_nan_of(bool neg);
template <> TSR_INL float tsr_nan_of<float>(bool neg) { return tsr_u2f(neg ? 0xffc00000u : 0x7fc00000u); }
template <> TSR_INL double tsr_nan_of<double>(bool neg) { return neg ? TSR_NAN_NEG : TSR_NAN; }
template <class T> TSR_FN T tsr_widen(float x) {
  unsigned b = tsr_f2u(x);
  return (b & 0x7fffffffu) > 0x7f800000u ? tsr_nan_of<T>(b >> 31) : (T)x;
}
#ifdef TSR_NARROW_TYPES
// narrow sources: NaN by their codes, every other value exactly through float
TSR_FN bool tsr_nan16(unsigned short h, unsigned short inf) { return (h & 0x7fffu) > inf; }
TSR_FN float tsr_wide(__half x) {
  unsigned short h = __half_as_ushort(x);
  return tsr_nan16(h, 0x7c00u) ? tsr_u2f(h >> 15 ? 0xffc00000u : 0x7fc00000u) : __half2float(x);
}
TSR_FN float tsr_wide(__nv_bfloat16 x) {
  unsigned short h = __bfloat16_as_ushort(x);
  return tsr_nan16(h, 0x7f80u) ? tsr_u2f(h >> 15 ? 0xffc00000u : 0x7fc00000u) : __bfloat162float(x);
}
TSR_FN float tsr_wide(__nv_fp8_e4m3 x) {
  return (x.__x & 0x7f) == 0x7f ? tsr_u2f(x.__x >> 7 ? 0xffc00000u : 0x7fc00000u) : (float)x;
}
TSR_FN float tsr_wide(__nv_fp8_e5m2 x) {
  return (x.__x & 0x7f) > 0x7c ? tsr_u2f(x.__x >> 7 ? 0xffc00000u : 0x7fc00000u) : (float)x;
}
template <class T, int R = TSR_RNE, int O = TSR_NATIVE> TSR_FN T tsr_cvt(__half x) { return tsr_cvt<T, R, O>(tsr_wide(x)); }
template <class T, int R = TSR_RNE, int O = TSR_NATIVE> TSR_FN T tsr_cvt(__nv_bfloat16 x) {
  return tsr_cvt<T, R, O>(tsr_wide(x));
}
template <class T, int R = TSR_RNE, int O = TSR_NATIVE> TSR_FN T tsr_cvt(__nv_fp8_e4m3 x) {
  return tsr_cvt<T, R, O>(tsr_wide(x));
}
template <class T, int R = TSR_RNE, int O = TSR_NATIVE> TSR_FN T tsr_cvt(__nv_fp8_e5m2 x) {
  return tsr_cvt<T, R, O>(tsr_wide(x));
}
template <class T, int O = TSR_NATIVE, class S> TSR_FN T tsr_cvt_sr(S x, unsigned rbits) {  // narrow sources
  return tsr_cvt_sr<T, O>(tsr_wide(x), rbits);
}
template <class T> TSR_FN T tsr_widen(__half x) { return tsr_widen<T>(tsr_wide(x)); }
template <class T> TSR_FN T tsr_widen(__nv_bfloat16 x) { return tsr_widen<T>(tsr_wide(x)); }
template <class T> TSR_FN T tsr_widen(__nv_fp8_e4m3 x) { return tsr_widen<T>(tsr_wide(x)); }
template <class T> TSR_FN T tsr_widen(__nv_fp8_e5m2 x) { return tsr_widen<T>(tsr_wide(x)); }
// the canonical quiet NaN (sign clear) in place of any NaN of a narrow format, by its code
TSR_FN __half tsr_canon(__half x) { return tsr_nan16(__half_as_ushort(x), 0x7c00u) ? __ushort_as_half(0x7e00u) : x; }
TSR_FN __nv_bfloat16 tsr_canon(__nv_bfloat16 x) {
  return tsr_nan16(__bfloat16_as_ushort(x), 0x7f80u) ? __ushort_as_bfloat16(0x7fc0u) : x;
}
TSR_FN __nv_fp8_e4m3 tsr_canon(__nv_fp8_e4m3 x) { if ((x.__x & 0x7f) == 0x7f) x.__x = 0x7f; return x; }
TSR_FN __nv_fp8_e5m2 tsr_canon(__nv_fp8_e5m2 x) { if ((x.__x & 0x7f) > 0x7c) x.__x = 0x7e; return x; }

// 16-bit formats: max/min and NUM-MATH through f32 (exact widening; the math in an f32
// accumulator, rounded once into f32 and then into the 16-bit format, as the interpreter does)
TSR_FN __half tsr_max(__half a, __half b) { return tsr_cvt<__half>(tsr_max(__half2float(a), __half2float(b))); }
TSR_FN __half tsr_min(__half a, __half b) { return tsr_cvt<__half>(tsr_min(__half2float(a), __half2float(b))); }
TSR_FN __nv_bfloat16 tsr_max(__nv_bfloat16 a, __nv_bfloat16 b) {
  return tsr_cvt<__nv_bfloat16>(tsr_max(__bfloat162float(a), __bfloat162float(b)));
}
TSR_FN __nv_bfloat16 tsr_min(__nv_bfloat16 a, __nv_bfloat16 b) {
  return tsr_cvt<__nv_bfloat16>(tsr_min(__bfloat162float(a), __bfloat162float(b)));
}
#define TSR_MATH16(fn)                                                                                   \
  TSR_FN __half tsr_##fn(__half x) { return tsr_cvt<__half>(tsr_##fn(__half2float(x))); }               \
  TSR_FN __nv_bfloat16 tsr_##fn(__nv_bfloat16 x) { return tsr_cvt<__nv_bfloat16>(tsr_##fn(__bfloat162float(x))); }
TSR_MATH16(exp) TSR_MATH16(expm1) TSR_MATH16(log) TSR_MATH16(sin) TSR_MATH16(cos) TSR_MATH16(tanh)
TSR_MATH16(erf) TSR_MATH16(erfc) TSR_MATH16(sigmoid) TSR_MATH16(silu) TSR_MATH16(gelu) TSR_MATH16(gelu_tanh)
TSR_MATH16(rsqrt)
#undef TSR_MATH16
#endif  // TSR_NARROW_TYPES

// CuTe Swizzle<3,4,3> on byte offsets (o ^ ((o & (7 << 7)) >> 3)), back in elements
#define TSR_SWIZZLE(off, itemsize) \
  (((((long)(off)) * (itemsize)) ^ (((((long)(off)) * (itemsize)) & (7L << 7)) >> 3)) / (itemsize))

// ---------------------------------------------------------------------------------------
// device only: asynchronous copies, warp shuffles, tensor-core MMA

#ifdef TSR_DEVICE
template <int BYTES> TSR_FN void tsr_cp_async(void* smem, const void* gmem) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  if (BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(BYTES) : "memory");
}
TSR_FN void tsr_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> TSR_FN void tsr_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

TSR_FN float tsr_shfl_xor(float x, int offset) { return __shfl_xor_sync(0xffffffffu, x, offset); }
TSR_FN double tsr_shfl_xor(double x, int offset) { return __shfl_xor_sync(0xffffffffu, x, offset); }
TSR_FN int tsr_shfl_xor(int x, int offset) { return __shfl_xor_sync(0xffffffffu, x, offset); }
TSR_FN long tsr_shfl_xor(long x, int offset) { return __shfl_xor_sync(0xffffffffu, x, offset); }

// mma.sync.aligned.<shape>.row.col.f32.<ab>.<ab>.f32: d[4] = a·b + c[4]; a: 4 x u32, b: 2 x u32
#define TSR_MMA(name, shape, ab)                                                                          \
  TSR_FN void name(float* d, const unsigned* a, const unsigned* b, const float* c) {                      \
    asm volatile("mma.sync.aligned." shape ".row.col.f32." ab "." ab ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, " \
                 "{%8,%9}, {%10,%11,%12,%13};\n"                                                          \
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                         \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), \
                   "f"(c[2]), "f"(c[3]));                                                                 \
  }
TSR_MMA(tsr_mma_m16n8k16_bf16, "m16n8k16", "bf16")
TSR_MMA(tsr_mma_m16n8k16_f16, "m16n8k16", "f16")
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
// m16n8k32 with fp8 inputs (sm_89+): a: 4 x u32 (16 bytes, the lowest k in the lowest byte),
// b: 2 x u32, the PTX fragment layouts
TSR_MMA(tsr_mma_m16n8k32_e4m3, "m16n8k32", "e4m3")
TSR_MMA(tsr_mma_m16n8k32_e5m2, "m16n8k32", "e5m2")
#endif
#undef TSR_MMA

template <int N, bool TRANS = false> TSR_FN void tsr_ldmatrix(unsigned* r, const void* smem) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 8x8 matrices");
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  if (N == 1) {
    if (TRANS) asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s));
    else asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(s));
  } else if (N == 2) {
    if (TRANS)
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
  } else {
    if (TRANS)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
  }
}
#endif  // TSR_DEVICE

// ---------------------------------------------------------------------------------------
// NUM-RNG: Philox4x32-10 (Salmon et al., SC 2011; NUM-RNG-1) and the draws of an element
// index i under the key words (k0, k1) of RNGKey(seed, stream) (NUM-RNG-2…5). Host and device.
//   tsr_philox4x32_10(ctr[4], key[2], out[4])
//   tsr_random_bits(i, k0, k1)   word i mod 4 of block (lo32 n, hi32 n, 0, 0), n = i / 4
//   tsr_uniform_f32(i, k0, k1)   (bits >> 8)·2^-24
//   tsr_uniform_f64(i, k0, k1)   words a, b = 2(i mod 2), 2(i mod 2)+1 of block (lo32 n, hi32 n, 1, 0),
//                                n = i / 2: ((a >> 5)·2^26 + (b >> 6))·2^-53

TSR_FN unsigned tsr_mulhi(unsigned a, unsigned b) {
#ifdef TSR_DEVICE
  return __umulhi(a, b);
#else
  return (unsigned)(((tsr_u64)a * b) >> 32);
#endif
}
TSR_FN void tsr_philox4x32_10(const unsigned* ctr, const unsigned* key, unsigned* out) {
  unsigned c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
#ifdef TSR_DEVICE
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    if (r) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }  // the key bump between rounds (mod 2^32)
    unsigned hi0 = tsr_mulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    unsigned hi1 = tsr_mulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}
TSR_FN unsigned tsr_random_bits(tsr_u64 i, unsigned k0, unsigned k1) {
  tsr_u64 n = i >> 2;
  unsigned ctr[4] = {(unsigned)n, (unsigned)(n >> 32), 0u, 0u}, key[2] = {k0, k1}, w[4];
  tsr_philox4x32_10(ctr, key, w);
  unsigned j = (unsigned)(i & 3);
  return j == 0 ? w[0] : j == 1 ? w[1] : j == 2 ? w[2] : w[3];
}
TSR_FN float tsr_uniform_f32(tsr_u64 i, unsigned k0, unsigned k1) {
  return (float)(tsr_random_bits(i, k0, k1) >> 8) * 0x1p-24f;  // 24 bits: both steps exact
}
TSR_FN double tsr_uniform_f64(tsr_u64 i, unsigned k0, unsigned k1) {
  tsr_u64 n = i >> 1;
  unsigned ctr[4] = {(unsigned)n, (unsigned)(n >> 32), 1u, 0u}, key[2] = {k0, k1}, w[4];
  tsr_philox4x32_10(ctr, key, w);
  bool odd = (i & 1) != 0;
  unsigned a = odd ? w[2] : w[0], b = odd ? w[3] : w[1];
  return (double)(((tsr_u64)(a >> 5) << 26) | (b >> 6)) * 0x1p-53;  // 53 bits: exact
}
