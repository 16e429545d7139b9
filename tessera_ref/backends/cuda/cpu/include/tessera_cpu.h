// tessera_cpu.h: the CPU twin of CUDA's device environment for the CUDA-on-CPU harness
// (docs/spec/cuda_cpu.md, CUDA-CPU-1 … 6).
//
// The rendered CUDA C includes <cuda_fp16.h>, <cuda_bf16.h>, <cuda_fp8.h> and
// "tessera_device.cuh"; in the harness the first three are this directory's stand-ins, which
// include this file. As CUDA's headers do on a GPU, it first declares the narrow types —
// __half, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2 (exact decoding) and the intrinsics
// tessera_device.cuh's narrow-format sections use — and defines TSR_NARROW_TYPES; then it
// includes tessera_device.cuh (g++: no __CUDACC__), whose host half and narrow-format sections
// (tsr_cvt / tsr_widen / tsr_cvt_sr of the narrow types, tsr_canon, the 16-bit tsr_max/min and
// NUM-MATH entry points: every rounding through NUM-CVT's encoder) compile as they do under
// NVRTC; then it supplies what the device-only section and CUDA supply on a GPU —
//   the keywords (__global__, __launch_bounds__, __align__, extern __shared__),
//   threadIdx / blockIdx / blockDim / gridDim of the running fiber and block,
//   __syncthreads (a yield point; its source line is its site id),
//   the vector types (float2/4, double2, uint2/4) and make_*, the 16-bit + - * / and comparisons,
//   tsr_cp_async<4|8|16>, tsr_cp_async_commit, tsr_cp_async_wait<N> (eager or deferred copies),
//   tsr_shfl_xor / __shfl_xor_sync, __ballot_sync, tsr_ldmatrix<N, TRANS> and
//   mma.sync m16n8k16 (bf16, f16) and m16n8k32 (e4m3, e5m2) (warp collectives: all 32 lanes
//   must arrive; the mma computes the tensor-core block-FMA model of tessera_ref/numerics/tc.py
//   with the launch's parameters),
//   atomicAdd / atomicMax / atomicCAS / atomicExch (fibers are never preempted: a plain
//   read-modify-write is atomic).
// Arithmetic is g++'s IEEE binary32/64 with -ffp-contract=off: an fma only where the source calls fmaf/fma.
#pragma once
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include "tessera_fiber.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __shared__

#define threadIdx (tsr_cpu::self().tid)
#define blockIdx (tsr_cpu::rt().block)
#define blockDim (tsr_cpu::rt().dim)
#define gridDim (tsr_cpu::rt().grid)
#define __syncthreads() (tsr_cpu::barrier(__LINE__))

using std::fabs;
using std::fma;
using std::fmaf;
using std::sqrt;

struct float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(16))) double2 { double x, y; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline double2 make_double2(double x, double y) { return {x, y}; }

// -- the narrow formats: storage, exact decoding, the intrinsics tessera_device.cuh uses ---------
namespace tsr_cpu {
inline double decode(unsigned code, int man, int bias, int bits, bool fn) {  // exact value of a code
  unsigned sign = code >> (bits - 1), ex = (code >> man) & ((1u << (bits - 1 - man)) - 1);
  unsigned fr = code & ((1u << man) - 1);
  unsigned top = (1u << (bits - 1 - man)) - 1;
  double v;
  if (fn ? (ex == top && fr == (1u << man) - 1) : (ex == top && fr)) v = std::numeric_limits<double>::quiet_NaN();
  else if (!fn && ex == top) v = std::numeric_limits<double>::infinity();
  else v = ex ? std::ldexp((double)(fr | (1u << man)), (int)ex - bias - man) : std::ldexp((double)fr, 1 - bias - man);
  return sign ? -v : v;
}
}  // namespace tsr_cpu

struct __half {
  unsigned short __x;
  explicit operator float() const { return (float)tsr_cpu::decode(__x, 10, 15, 16, false); }
  explicit operator double() const { return tsr_cpu::decode(__x, 10, 15, 16, false); }
};
struct __nv_bfloat16 {
  unsigned short __x;
  explicit operator float() const {
    unsigned u = (unsigned)__x << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  explicit operator double() const { return (double)(float)*this; }
};
typedef unsigned char __nv_fp8_storage_t;
struct __nv_fp8_e4m3 {
  __nv_fp8_storage_t __x;
  explicit operator float() const { return (float)tsr_cpu::decode(__x, 3, 7, 8, true); }
  explicit operator double() const { return tsr_cpu::decode(__x, 3, 7, 8, true); }
};
struct __nv_fp8_e5m2 {
  __nv_fp8_storage_t __x;
  explicit operator float() const { return (float)tsr_cpu::decode(__x, 2, 15, 8, false); }
  explicit operator double() const { return tsr_cpu::decode(__x, 2, 15, 8, false); }
};
inline float __half2float(__half h) { return (float)h; }
inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
inline __half __ushort_as_half(unsigned short x) { return {x}; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return {x}; }

inline unsigned short __half_as_ushort(__half x) { return x.__x; }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 x) { return x.__x; }
inline __half __habs(__half x) { x.__x &= 0x7fffu; return x; }
inline __nv_bfloat16 __habs(__nv_bfloat16 x) { x.__x &= 0x7fffu; return x; }

// the device header: its host half and, for the types above, its narrow-format sections
#define TSR_NARROW_TYPES 1
#include "tessera_device.cuh"


// 16-bit arithmetic as cuda_fp16.hpp / cuda_bf16.hpp's operators on sm_80+ (HADD, HMUL …, one
// rounding): the operation exact (or, for /, correctly rounded) in f64, then NUM-CVT's rounding
// (f64 has more than 2·11 + 2 bits: no double-rounding error)
#define TSR_CPU_ARITH(T)                                                                              \
  inline T operator+(T a, T b) { return tsr_cvt<T>((double)a + (double)b); }                          \
  inline T operator-(T a, T b) { return tsr_cvt<T>((double)a - (double)b); }                          \
  inline T operator*(T a, T b) { return tsr_cvt<T>((double)a * (double)b); }                          \
  inline T operator/(T a, T b) { return tsr_cvt<T>((double)a / (double)b); }                          \
  inline T operator-(T a) { T r = a; r.__x ^= 0x8000; return r; }                                       \
  inline bool operator==(T a, T b) { return (double)a == (double)b; }                                   \
  inline bool operator!=(T a, T b) { return (double)a != (double)b; }                                   \
  inline bool operator<(T a, T b) { return (double)a < (double)b; }                                     \
  inline bool operator<=(T a, T b) { return (double)a <= (double)b; }                                   \
  inline bool operator>(T a, T b) { return (double)a > (double)b; }                                     \
  inline bool operator>=(T a, T b) { return (double)a >= (double)b; }
TSR_CPU_ARITH(__half)
TSR_CPU_ARITH(__nv_bfloat16)
#undef TSR_CPU_ARITH

// -- the tensor-core block-FMA model (numerics/tc.py, NUM-TC-2 … 5) ---------------------------------
namespace tsr_cpu {
constexpr int LOW = -(1 << 20);  // the exponent of "no term"

inline int exponent_of(double x, int emin) {  // max(floor(log2 |x|), emin) of a finite nonzero x
  int e;
  std::frexp(x, &e);
  return e - 1 > emin ? e - 1 : emin;
}

// S·2^g rounded toward zero to `bits` significant bits in f32's range; ±inf from 2^128
inline float round_rz(long long S, int g, int bits) {
  if (S == 0) return 0.0f;
  int e;
  std::frexp((double)S, &e);
  int qe = (e - 1 + g > -126 ? e - 1 + g : -126) - (bits - 1);
  int shift = qe - g > 0 ? qe - g : 0;
  long long q = shift >= 62 ? 0 : S / (1ll << shift);  // C division truncates toward zero
  double v = q ? std::ldexp((double)q, g + shift) : (S < 0 ? -0.0 : 0.0);
  if (std::fabs(v) >= 0x1p128) v = std::copysign((double)TSR_INF, v);
  return (float)v;
}

// one block: the finite accumulator and n finite products with their exponents (LOW: zero product)
inline float block_fma(float acc, const double* P, const int* Ep, int n, int align) {
  int E = acc != 0 ? exponent_of(acc, -126) : LOW;
  for (int i = 0; i < n; ++i) E = Ep[i] > E ? Ep[i] : E;
  if (E == LOW) return 0.0f;
  int g = E - 23 - align;
  long long S = (long long)std::trunc(std::ldexp((double)acc, -g));
  for (int i = 0; i < n; ++i) S += (long long)std::trunc(std::ldexp(P[i], -g));
  return round_rz(S, g, 24 + (align < 0 ? align : 0));
}

// d = c + a·b over one instruction of K products, the blocks of `products` taking k in `order`;
// a, b: exact values with exponent floor emin. The accumulator c enters the first block, or (fadd)
// the blocks start from +0 and c is added to their result by one f32 add (round to nearest even)
inline float dot_model(float c, const double* a, const double* b, int K, int emin, const int* order, int products,
                       int align, bool fadd) {
  bool nan = !fadd && c != c, pinf = !fadd && c == TSR_INFF, ninf = !fadd && c == -TSR_INFF;
  float acc = fadd ? 0.0f : c;
  double P[32];
  int Ep[32];
  for (int k0 = 0; k0 < K; k0 += products) {
    for (int i = 0; i < products; ++i) {
      int k = order[k0 + i];
      double p = a[k] * b[k];  // exact in f64; 0·inf is NaN
      nan |= p != p;
      pinf |= p == TSR_INF;
      ninf |= p == -TSR_INF;
      bool live = p == p && std::fabs(p) != TSR_INF && p != 0;
      P[i] = live ? p : 0.0;
      Ep[i] = live ? exponent_of(a[k], emin) + exponent_of(b[k], emin) : LOW;
    }
    if (std::fabs(acc) != TSR_INFF && acc == acc) acc = block_fma(acc, P, Ep, products, align);
  }
  float part = nan || (pinf && ninf) ? TSR_NANF : pinf ? TSR_INFF : ninf ? -TSR_INFF : acc;
  if (!fadd) return part;
  float d = c + part;  // IEEE f32, round to nearest even
  return d != d ? TSR_NANF : d;
}
}  // namespace tsr_cpu

// -- the warp operations (their semantics, run when all 32 lanes have arrived) -----------------
namespace tsr_cpu {
enum MmaFormat { BF16 = 1, F16 = 2, E4M3 = 3, E5M2 = 4 };

// the exact value of one operand element's bits (16 bits for BF16/F16, 8 for E4M3/E5M2)
inline double mma_value(unsigned code, int fmt) {
  switch (fmt) {
    case BF16: return (double)tsr_u2f(code << 16);
    case F16: return decode(code, 10, 15, 16, false);
    case E4M3: return decode(code, 3, 7, 8, true);
    default: return decode(code, 2, 15, 8, false);
  }
}

inline void release_mma(Runtime& r, Fiber* w) {
  // mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16} and m16n8k32.row.col.f32.{e4m3,e5m2}: the PTX
  // fragment layouts with g = lane >> 2, t = lane & 3 and `per` elements a register (the lowest k
  // in the lowest bits): a_i holds row g (+8 for odd i), k = per·t … (+K/2 for i ≥ 2); b_i column g,
  // k = per·t … (+K/2 for i = 1); c_i row g (+8 for i ≥ 2), column 2t + (i & 1)
  int fmt = w[0].mma_fmt;
  int K = fmt == E4M3 || fmt == E5M2 ? 32 : 16, per = K / 8, bits = 32 / per;
  unsigned mask = (1u << bits) - 1;
  double A[16][32], B[32][8];
  float C[16][8];
  for (int l = 0; l < 32; ++l) {
    const Fiber& f = w[l];
    int g = l >> 2, t = l & 3;
    for (int j = 0; j < per; ++j) {
      for (int i = 0; i < 4; ++i)
        A[g + (i & 1) * 8][per * t + (i >> 1) * K / 2 + j] = mma_value((f.mma_a[i] >> (bits * j)) & mask, fmt);
      for (int i = 0; i < 2; ++i) B[per * t + i * K / 2 + j][g] = mma_value((f.mma_b[i] >> (bits * j)) & mask, fmt);
    }
    for (int i = 0; i < 4; ++i) C[g + (i >> 1) * 8][2 * t + (i & 1)] = f.mma_c[i];
  }
  for (int l = 0; l < 32; ++l) {
    Fiber& f = w[l];
    int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) {
      int row = g + (i >> 1) * 8, col = 2 * t + (i & 1);
      double bcol[32];
      for (int k = 0; k < K; ++k) bcol[k] = B[k][col];
      f.mma_c[i] = dot_model(C[row][col], A[row], bcol, K, r.opt.tc_emin, r.opt.tc_order, r.opt.tc_products,
                             r.opt.tc_align, r.opt.tc_fadd != 0);
    }
  }
}

inline void release_ldmatrix(Fiber* w) {
  // ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16: lane 8m + i gives row i of matrix m
  int n = w[0].ld_n, trans = w[0].ld_trans;
  for (int l = 0; l < 32; ++l) {
    int g = l >> 2, t = l & 3;
    for (int m = 0; m < n; ++m) {
      const unsigned short* lo;
      const unsigned short* hi;
      if (!trans) {
        lo = (const unsigned short*)w[8 * m + g].address + 2 * t;
        hi = lo + 1;
      } else {
        lo = (const unsigned short*)w[8 * m + 2 * t].address + g;
        hi = (const unsigned short*)w[8 * m + 2 * t + 1].address + g;
      }
      w[l].ld_r[m] = (unsigned)*lo | ((unsigned)*hi << 16);
    }
  }
}

inline void release_warp(Runtime& r, unsigned warp) {
  Fiber* w = &r.fibers[warp * 32];
  switch (w[0].op) {
    case SHFL:
      for (int l = 0; l < 32; ++l) {
        int src = l ^ w[l].offset;
        w[l].result = src < 32 ? w[src].value : w[l].value;
      }
      break;
    case BALLOT: {
      unsigned long long bits = 0;
      for (int l = 0; l < 32; ++l) bits |= (unsigned long long)(w[l].value != 0) << l;
      for (int l = 0; l < 32; ++l) w[l].result = bits;
      break;
    }
    case MMA: release_mma(r, w); break;
    default: release_ldmatrix(w);
  }
}

// The device operations, called through macros that pass the CUDA source line.
struct At {  // each operation records its line as the thread's current one (named by a memory fault)
  int line;
  template <int BYTES> void cp_async(void* dst, const void* src) const {
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    Fiber& f = self();
    f.line = line;
    Copy c{dst, src, BYTES, f.committed};
    if (rt().opt.eager) perform(c);
    else f.copies.push_back(c);
  }
  void commit() const { ++self().committed; }
  template <int N> void wait() const {
    self().line = line;
    complete_copies(self(), N);
  }
  template <class T> T shfl_xor(T x, int offset) const {
    static_assert(sizeof(T) <= 8, "a shuffle moves at most 8 bytes");
    Fiber& f = self();
    f.value = 0;
    std::memcpy(&f.value, &x, sizeof x);
    f.offset = offset;
    warp_op(SHFL, line);
    T out;
    std::memcpy(&out, &f.result, sizeof out);
    return out;
  }
  unsigned ballot(int predicate) const {
    Fiber& f = self();
    f.value = predicate != 0;
    warp_op(BALLOT, line);
    return (unsigned)f.result;
  }
  void mma(int fmt, float& d0, float& d1, float& d2, float& d3, unsigned a0, unsigned a1, unsigned a2,
           unsigned a3, unsigned b0, unsigned b1) const {
    Fiber& f = self();
    if (!rt().opt.tc_products) {
      finding(UNSUPPORTED, line, 0, "mma.sync at line %d: this launch names no tensor-core model (the harness "
              "computes mma.sync with the block-FMA model of the kernel's tc: policy)", line);
      yield();  // the launch ends here
    }
    f.mma_fmt = fmt;
    f.mma_a[0] = a0; f.mma_a[1] = a1; f.mma_a[2] = a2; f.mma_a[3] = a3;
    f.mma_b[0] = b0; f.mma_b[1] = b1;
    f.mma_c[0] = d0; f.mma_c[1] = d1; f.mma_c[2] = d2; f.mma_c[3] = d3;
    warp_op(MMA, line);
    d0 = f.mma_c[0]; d1 = f.mma_c[1]; d2 = f.mma_c[2]; d3 = f.mma_c[3];
  }
  template <int N, bool TRANS = false> void ldmatrix(unsigned* r, const void* smem_row) const {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 8x8 matrices");
    Fiber& f = self();
    f.address = smem_row;
    f.ld_n = N;
    f.ld_trans = TRANS;
    warp_op(LDMATRIX, line);
    for (int i = 0; i < N; ++i) r[i] = f.ld_r[i];
  }
};
}  // namespace tsr_cpu

#define tsr_cp_async tsr_cpu::At{__LINE__}.cp_async
#define tsr_cp_async_commit tsr_cpu::At{__LINE__}.commit
#define tsr_cp_async_wait tsr_cpu::At{__LINE__}.wait
#define tsr_ldmatrix tsr_cpu::At{__LINE__}.ldmatrix
#define tsr_shfl_xor(x, offset) (tsr_cpu::At{__LINE__}.shfl_xor((x), (offset)))
#define __shfl_xor_sync(mask, x, offset) (tsr_cpu::At{__LINE__}.shfl_xor((x), (offset)))
#define __ballot_sync(mask, predicate) (tsr_cpu::At{__LINE__}.ballot(predicate))
// the device header's mma.sync entry points (the renderer calls them); d may be c
#define TSR_CPU_MMA(fmt, d, a, b, c)                                                                         \
  ((d)[0] = (c)[0], (d)[1] = (c)[1], (d)[2] = (c)[2], (d)[3] = (c)[3],                                     \
   tsr_cpu::At{__LINE__}.mma(fmt, (d)[0], (d)[1], (d)[2], (d)[3], (a)[0], (a)[1], (a)[2], (a)[3], (b)[0], (b)[1]))
#define tsr_mma_m16n8k16_bf16(d, a, b, c) TSR_CPU_MMA(tsr_cpu::BF16, d, a, b, c)
#define tsr_mma_m16n8k16_f16(d, a, b, c) TSR_CPU_MMA(tsr_cpu::F16, d, a, b, c)
#define tsr_mma_m16n8k32_e4m3(d, a, b, c) TSR_CPU_MMA(tsr_cpu::E4M3, d, a, b, c)
#define tsr_mma_m16n8k32_e5m2(d, a, b, c) TSR_CPU_MMA(tsr_cpu::E5M2, d, a, b, c)

template <class T> inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <class T> inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <class T> inline T atomicCAS(T* p, T expected, T v) { T old = *p; if (old == expected) *p = v; return old; }
inline int atomicMax(int* p, int v) { int old = *p; if (v > old) *p = v; return old; }
inline unsigned atomicMax(unsigned* p, unsigned v) { unsigned old = *p; if (v > old) *p = v; return old; }

// A kernel's launch: the parameters unpacked from void* args by the kernel's own parameter types
// (pointers as given, scalars read through their pointer), each fiber calling the kernel.
namespace tsr_cpu {
template <class T> struct Arg { static T get(void* p) { return *static_cast<T*>(p); } };
template <class T> struct Arg<T*> { static T* get(void* p) { return static_cast<T*>(p); } };
template <class... P, size_t... I> void call(void (*kernel)(P...), void** args, std::index_sequence<I...>) {
  kernel(Arg<P>::get(args[I])...);
}
}  // namespace tsr_cpu
#define TSR_CPU_LAUNCHER(kernel)                                                                         \
  static void tsr_cpu_entry_##kernel(void** args) {                                                      \
    tsr_cpu::call(&kernel, args, std::make_index_sequence<tsr_cpu::Arity<decltype(&kernel)>::value>{});  \
  }                                                                                                      \
  extern "C" __attribute__((visibility("default"))) int tsr_launch_##kernel(                             \
      const long* grid, int lanes, void** args, const tsr_cpu_options* opt, tsr_cpu_result* out) {      \
    return tsr_cpu::launch(&tsr_cpu_entry_##kernel, grid, lanes, args, opt, out);                        \
  }
namespace tsr_cpu {
template <class F> struct Arity;
template <class... P> struct Arity<void (*)(P...)> { static constexpr size_t value = sizeof...(P); };
}  // namespace tsr_cpu
