// Host build of tessera_device.cuh for tests/cuda/test_device_header.py (g++ -ffp-contract=off):
// exports the header's NUM-MATH entry points and NUM-CVT encoders over arrays, by name.
#include <cstring>
#include "tessera_device.cuh"

typedef double (*f64_fn)(double);
typedef float (*f32_fn)(float);
struct Entry { const char* name; f64_fn d; f32_fn f; };
#define E(fn) {#fn, static_cast<f64_fn>(tsr_##fn), static_cast<f32_fn>(tsr_##fn)}
static const Entry MATH[] = {E(exp), E(expm1), E(log), E(sin), E(cos), E(tanh), E(erf), E(erfc),
                             E(sigmoid), E(silu), E(gelu), E(gelu_tanh), E(rsqrt)};
static const Entry* find(const char* name) {
  for (const Entry& e : MATH) if (!std::strcmp(e.name, name)) return &e;
  return nullptr;
}

extern "C" int tsr_math_f64(const char* name, const double* x, double* out, long n) {
  const Entry* e = find(name);
  if (!e) return -1;
  for (long i = 0; i < n; ++i) out[i] = e->d(x[i]);
  return 0;
}
extern "C" int tsr_math_f32(const char* name, const float* x, float* out, long n) {
  const Entry* e = find(name);
  if (!e) return -1;
  for (long i = 0; i < n; ++i) out[i] = e->f(x[i]);
  return 0;
}
extern "C" int tsr_extreme(const char* name, int f64, const void* a, const void* b, void* out, long n) {
  bool mx = !std::strcmp(name, "max");
  for (long i = 0; i < n; ++i) {
    if (f64) ((double*)out)[i] = mx ? tsr_max(((const double*)a)[i], ((const double*)b)[i])
                                   : tsr_min(((const double*)a)[i], ((const double*)b)[i]);
    else ((float*)out)[i] = mx ? tsr_max(((const float*)a)[i], ((const float*)b)[i])
                              : tsr_min(((const float*)a)[i], ((const float*)b)[i]);
  }
  return 0;
}
extern "C" int tsr_pow_arrays(int f64, const void* x, const void* y, void* out, long n) {
  for (long i = 0; i < n; ++i) {
    if (f64) ((double*)out)[i] = tsr_pow(((const double*)x)[i], ((const double*)y)[i]);
    else ((float*)out)[i] = tsr_pow(((const float*)x)[i], ((const float*)y)[i]);
  }
  return 0;
}
extern "C" int tsr_cvt_codes(const char* fmt, const double* x, unsigned long long* out, long n) {
  tsr_u64 (*enc)(double) = !std::strcmp(fmt, "f32") ? tsr_cvt_bits_f32 : !std::strcmp(fmt, "f16") ? tsr_cvt_bits_f16
                         : !std::strcmp(fmt, "bf16") ? tsr_cvt_bits_bf16 : !std::strcmp(fmt, "fp8_e4m3") ? tsr_cvt_bits_e4m3
                         : !std::strcmp(fmt, "fp8_e5m2") ? tsr_cvt_bits_e5m2 : nullptr;
  if (!enc) return -1;
  for (long i = 0; i < n; ++i) out[i] = enc(x[i]);
  return 0;
}
// NUM-CVT with every rounding (0 rne, 1 rtz, 2 rup, 3 rdown, 4 stochastic with rbits[i]) and
// overflow (0 native, 1 saturate) mode, from exact doubles, into the codes of a format
extern "C" int tsr_cvt_codes_mode(const char* fmt, int rounding, int overflow, const double* x, const unsigned* rbits,
                                  unsigned long long* out, long n) {
  tsr_u64 (*code)(double, int, int, unsigned) =
      !std::strcmp(fmt, "f32") ? tsr_fmt<float>::code : !std::strcmp(fmt, "f16") ? tsr_fmt<tsr_f16_tag>::code
      : !std::strcmp(fmt, "bf16") ? tsr_fmt<tsr_bf16_tag>::code : !std::strcmp(fmt, "fp8_e4m3") ? tsr_fmt<tsr_e4m3_tag>::code
      : !std::strcmp(fmt, "fp8_e5m2") ? tsr_fmt<tsr_e5m2_tag>::code : nullptr;
  if (!std::strcmp(fmt, "f64")) {
    for (long i = 0; i < n; ++i) out[i] = tsr_cvt_bits_f64(x[i], overflow);
    return 0;
  }
  if (!code) return -1;
  for (long i = 0; i < n; ++i) out[i] = code(x[i], rounding, overflow, rbits ? rbits[i] : 0u);
  return 0;
}
// f32 sources through the typed entry points: tsr_cvt<float> (rne, rtz + saturate), tsr_cvt<double>,
// tsr_widen<double>, tsr_widen<float> (NaN by its code, with its sign)
extern "C" void tsr_cvt_from_f32(const float* x, float* rne, float* rtz_sat, double* to_f64, double* widened,
                                 float* same, long n) {
  for (long i = 0; i < n; ++i) {
    rne[i] = tsr_cvt<float>(x[i]);
    rtz_sat[i] = tsr_cvt<float, TSR_RTZ, TSR_SATURATE>(x[i]);
    to_f64[i] = tsr_cvt<double>(x[i]);
    widened[i] = tsr_widen<double>(x[i]);
    same[i] = tsr_widen<float>(x[i]);
  }
}
// NUM-RNG: Philox4x32-10 blocks (ctr: n x 4 words, key: n x 2 words) and the per-element draws
extern "C" void tsr_philox_blocks(const unsigned* ctr, const unsigned* key, unsigned* out, long n) {
  for (long i = 0; i < n; ++i) tsr_philox4x32_10(ctr + 4 * i, key + 2 * i, out + 4 * i);
}
extern "C" void tsr_draws(const unsigned long long* index, unsigned k0, unsigned k1, unsigned* bits, float* u32,
                          double* u64, long n) {
  for (long i = 0; i < n; ++i) {
    bits[i] = tsr_random_bits(index[i], k0, k1);
    u32[i] = tsr_uniform_f32(index[i], k0, k1);
    u64[i] = tsr_uniform_f64(index[i], k0, k1);
  }
}
