// Host build of tessera_device.cuh's narrow-format sections over the CUDA-on-CPU twin's narrow
// types (g++ -ffp-contract=off), for tests/cuda_cpu/test_narrow_section.py: exports them over
// arrays of codes.
#include <cstring>
#include "tessera_cpu.h"

template <class S> static S of_code(unsigned c) {
  S s;
  s.__x = (decltype(s.__x))c;
  return s;
}
template <class T> static unsigned long long code(T x) { return x.__x; }
static unsigned long long code(float x) { return tsr_f2u(x); }
static unsigned long long code(double x) { return tsr_d2u(x); }

// every code of a narrow source S: 11 results per code, in the order of the test's COLUMNS
template <class S> static void from(const unsigned* c, const unsigned* rbits, unsigned long long* out, long n) {
  for (long i = 0; i < n; ++i) {
    S x = of_code<S>(c[i]);
    unsigned long long* o = out + 11 * i;
    o[0] = code(tsr_cvt<double>(x));
    o[1] = code(tsr_cvt<float>(x));
    o[2] = code(tsr_cvt<__half>(x));
    o[3] = code(tsr_cvt<__nv_bfloat16>(x));
    o[4] = code(tsr_cvt<__nv_fp8_e4m3>(x));
    o[5] = code(tsr_cvt<__nv_fp8_e5m2>(x));
    o[6] = code(tsr_cvt<__nv_fp8_e4m3, TSR_RTZ, TSR_SATURATE>(x));
    o[7] = code(tsr_cvt_sr<__nv_fp8_e5m2>(x, rbits[i]));
    o[8] = code(tsr_widen<float>(x));
    o[9] = code(tsr_widen<double>(x));
    o[10] = code(tsr_canon(x));
  }
}
extern "C" int tsr_narrow_source(const char* fmt, const unsigned* c, const unsigned* rbits, unsigned long long* out,
                                 long n) {
  if (!std::strcmp(fmt, "f16")) from<__half>(c, rbits, out, n);
  else if (!std::strcmp(fmt, "bf16")) from<__nv_bfloat16>(c, rbits, out, n);
  else if (!std::strcmp(fmt, "fp8_e4m3")) from<__nv_fp8_e4m3>(c, rbits, out, n);
  else if (!std::strcmp(fmt, "fp8_e5m2")) from<__nv_fp8_e5m2>(c, rbits, out, n);
  else return -1;
  return 0;
}

// the 16-bit NUM-MATH entry points and tsr_max / tsr_min, code in, code out
template <class T> struct Math { const char* name; T (*fn)(T); };
#define E(T, fn) {#fn, static_cast<T (*)(T)>(tsr_##fn)}
#define TABLE(T)                                                                                          \
  {E(T, exp), E(T, expm1), E(T, log), E(T, sin), E(T, cos), E(T, tanh), E(T, erf), E(T, erfc), E(T, sigmoid), \
   E(T, silu), E(T, gelu), E(T, gelu_tanh), E(T, rsqrt)}
template <class T> static int math(const Math<T>* table, int size, const char* name, const unsigned* c,
                                   unsigned* out, long n) {
  for (int j = 0; j < size; ++j)
    if (!std::strcmp(table[j].name, name)) {
      for (long i = 0; i < n; ++i) out[i] = (unsigned)code(table[j].fn(of_code<T>(c[i])));
      return 0;
    }
  return -1;
}
static const Math<__half> F16[] = TABLE(__half);
static const Math<__nv_bfloat16> BF16[] = TABLE(__nv_bfloat16);
extern "C" int tsr_narrow_math(const char* name, int bf16, const unsigned* c, unsigned* out, long n) {
  return bf16 ? math(BF16, 13, name, c, out, n) : math(F16, 13, name, c, out, n);
}
template <class T> static void extreme(int mx, const unsigned* a, const unsigned* b, unsigned* out, long n) {
  for (long i = 0; i < n; ++i) {
    T x = of_code<T>(a[i]), y = of_code<T>(b[i]);
    out[i] = (unsigned)code(mx ? tsr_max(x, y) : tsr_min(x, y));
  }
}
extern "C" void tsr_narrow_extreme(int mx, int bf16, const unsigned* a, const unsigned* b, unsigned* out, long n) {
  if (bf16) extreme<__nv_bfloat16>(mx, a, b, out, n);
  else extreme<__half>(mx, a, b, out, n);
}
