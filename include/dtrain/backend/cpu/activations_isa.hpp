/// \file
/// The cpu backend's transcendental activations (backend/cpu/activations.hpp), written once for every
/// instruction set: activations.hpp includes this file once per set (each_isa.hpp), the baseline too,
/// with `DTRAIN_ISA` naming the set's namespace (backend/cpu/isa.hpp) and `DTRAIN_ISA_TARGET` its target
/// attribute (empty for the baseline). The loops call no library function: exp is Cephes' expf (range reduction by ln 2,
/// a degree-5 polynomial, the exponent set by bits) and erf Abramowitz and Stegun's 7.1.26 (absolute
/// error at most 1.5e-7), so the compiler turns each loop into the set's vector instructions. An element
/// may differ from libm's, and from another set's, in its last bits (a set with FMA contracts products).
/// On its own (without those macros) this file defines nothing. No include guard, by design.
#if defined(DTRAIN_ISA) && defined(DTRAIN_ISA_TARGET)

namespace dtrain::detail::DTRAIN_ISA {

struct activations {
  /// e^x for x in [-87.3, 88] (clamped there: 0 and overflow never occur), within 2 ulp.
  DTRAIN_ISA_TARGET DTRAIN_ISA_OP static float exp(float x) {
    x = x < -87.3f ? -87.3f : x > 88.0f ? 88.0f : x;
    constexpr float round = 12582912.0f;  // 1.5 * 2^23: adding it rounds to a whole number
    const float kr = x * 1.44269504088896341f + round;
    const std::int32_t k = std::bit_cast<std::int32_t>(kr) - std::bit_cast<std::int32_t>(round);
    const float kf = kr - round;
    float r = x - kf * 0.693359375f;
    r = r - kf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    return p * std::bit_cast<float>((k + 127) << 23);
  }
  /// erf(x) by Abramowitz and Stegun 7.1.26.
  DTRAIN_ISA_TARGET DTRAIN_ISA_OP static float erf(float x) {
    const float a = x < 0.0f ? -x : x;
    const float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    const float y = 1.0f - p * t * exp(-a * a);
    return x < 0.0f ? -y : y;
  }
  /// tanh(x): Cephes' odd polynomial below |x| = 0.625, 1 - 2 / (e^2|x| + 1) above, the sign restored.
  DTRAIN_ISA_TARGET DTRAIN_ISA_OP static float tanh(float x) {
    const float a = x < 0.0f ? -x : x, z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    const float small = p * z * x + x;
    const float big = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
    return a < 0.625f ? small : x < 0.0f ? -big : big;
  }

  DTRAIN_ISA_TARGET static void sigmoid(std::size_t n, const float* x, float* y) {
    for (std::size_t i = 0; i < n; ++i) y[i] = 1.0f / (1.0f + exp(-x[i]));
  }
  DTRAIN_ISA_TARGET static void tanh(std::size_t n, const float* x, float* y) {
    for (std::size_t i = 0; i < n; ++i) y[i] = tanh(x[i]);
  }
  /// Keras' exact GELU: x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2.
  DTRAIN_ISA_TARGET static void gelu(std::size_t n, const float* x, float* y) {
    for (std::size_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + erf(x[i] * 0.707106781186547524f));
  }
  /// dx = dy (Phi(z) + z phi(z)), phi the normal density.
  DTRAIN_ISA_TARGET static void gelu_backward(std::size_t n, const float* z, const float* dy, float* dx) {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = z[i];
      const float cdf = 0.5f * (1.0f + erf(v * 0.707106781186547524f));
      dx[i] = dy[i] * (cdf + v * 0.398942280401432678f * exp(-0.5f * v * v));
    }
  }
};

}  // namespace dtrain::detail::DTRAIN_ISA

#endif
