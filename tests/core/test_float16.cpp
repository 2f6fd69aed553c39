// bfloat16 and float16 against a reference written from the formats' definitions in double arithmetic:
// every 16-bit pattern widened, and floats across the whole range (a stride through all 2^32 patterns,
// every tie between two neighbouring 16-bit values, the overflow and subnormal boundaries) rounded; by
// the scalar conversions and by the span loops, which for float16 take F16C's instructions where the
// CPU has them (dtrain's portable code elsewhere).
#include <cmath>
#include <limits>
#include <vector>

#include "support/gradcheck.hpp"

#include <dtrain/core/float16.hpp>

using namespace dtrain;

namespace {

/// A format's parameters: significand bits after the point, the smallest normal exponent, the largest.
struct format {
  int mantissa, min_exponent, max_exponent;
};
constexpr format bf16_format{7, -126, 127}, fp16_format{10, -14, 15};

/// The value of the 16-bit pattern `bits` (1 sign, exponent, `f.mantissa` bits) by the definition.
double reference_value(std::uint16_t bits, format f) {
  const int exponent_bits = 15 - f.mantissa, bias = (1 << (exponent_bits - 1)) - 1;
  const int e = (bits >> f.mantissa) & ((1 << exponent_bits) - 1), m = bits & ((1 << f.mantissa) - 1);
  const double sign = bits & 0x8000 ? -1.0 : 1.0;
  if (e == (1 << exponent_bits) - 1) return m ? std::numeric_limits<double>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(double(m), 1 - bias - f.mantissa);
  return sign * std::ldexp(double(m + (1 << f.mantissa)), e - bias - f.mantissa);
}

/// x rounded to the format by the definition: to the nearest multiple of the quantum of x's binade (the
/// subnormals' below the smallest normal), ties to even, infinity beyond the largest finite value's
/// rounding range.
double reference_round(float x, format f) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return double(x);
  const double a = std::abs(double(x));
  const int e = std::max(std::ilogb(a), f.min_exponent);
  const double quantum = std::ldexp(1.0, e - f.mantissa);
  double r = std::nearbyint(a / quantum) * quantum;  // (the default rounding mode: to nearest, ties to even)
  const double largest = std::ldexp(2.0 - std::ldexp(1.0, -f.mantissa), f.max_exponent);
  if (r > largest) r = INFINITY;
  return std::copysign(r, double(x));
}

/// Whether a widened value equals the reference: NaN for NaN, else the same double, sign of zero included.
bool same(double got, double want) {
  if (std::isnan(want)) return std::isnan(got);
  return got == want && std::signbit(got) == std::signbit(want);
}

template <half_float T>
void check_widening(format f) {
  std::vector<T> all(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) all[b] = T{std::uint16_t(b)};
  std::vector<float> widened(all.size());
  widen(all.data(), all.size(), widened.data());  // the span loop: F16C for float16 where the CPU has it
  int bad = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const T h = all[b];
    const float w = float(h);
    if (!same(w, reference_value(h.bits, f)) || !same(widened[b], reference_value(h.bits, f))) ++bad;
    if (!std::isnan(w) && T::from(w) != h) ++bad;  // every finite value and infinity round-trips
  }
  BOOST_TEST(bad == 0);
}

template <half_float T>
void check_rounding(format f) {
  std::vector<float> xs;
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 65521) xs.push_back(std::bit_cast<float>(std::uint32_t(u)));
  for (std::uint32_t b = 0; b < 0x7fff; ++b) {  // each tie between neighbours (and a hair either side)
    const double lo = reference_value(std::uint16_t(b), f), hi = reference_value(std::uint16_t(b + 1), f);
    if (std::isnan(lo) || std::isnan(hi) || std::isinf(hi)) continue;
    const float mid = float((lo + hi) / 2);
    if (double(mid) != (lo + hi) / 2) continue;  // not a float (cannot happen for these formats)
    for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY)}) xs.push_back(x), xs.push_back(-x);
  }
  const double largest = std::ldexp(2.0 - std::ldexp(1.0, -f.mantissa), f.max_exponent);
  const double overflow = largest + std::ldexp(1.0, f.max_exponent - f.mantissa - 1);  // halfway to the next binade
  for (double x : {largest, overflow})
    for (float y : {float(x), std::nextafter(float(x), 0.0f), std::nextafter(float(x), INFINITY)}) xs.push_back(y);
  for (float y : {0.0f, -0.0f, INFINITY, -INFINITY, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::max()})
    xs.push_back(y);
  std::vector<T> rounded(xs.size());
  round_to(xs.data(), xs.size(), rounded.data());
  std::vector<float> widened(xs.size());
  widen(rounded.data(), rounded.size(), widened.data());
  int bad = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const double want = reference_round(xs[i], f);
    // the scalar conversion, and the loops over spans (vectorized, or F16C's) agreeing with it bit for
    // bit (but for NaN payloads)
    const bool ok = same(float(T::from(xs[i])), want) && same(widened[i], want) &&
                    (std::isnan(xs[i]) || rounded[i] == T::from(xs[i]));
    if (!ok && ++bad <= 5)
      BOOST_TEST_MESSAGE("x = " << xs[i] << " (bits " << std::bit_cast<std::uint32_t>(xs[i]) << "): got "
                                << float(T::from(xs[i])) << ", reference " << want);
  }
  BOOST_TEST(bad == 0);
  BOOST_TEST(xs.size() > 65536u);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(float16_formats)

BOOST_AUTO_TEST_CASE(every_bfloat16_and_float16_widens_to_its_value) {
  check_widening<bfloat16>(bf16_format);
  check_widening<float16>(fp16_format);
}

BOOST_AUTO_TEST_CASE(rounding_is_to_nearest_even_with_subnormals_overflow_and_nan) {
  check_rounding<bfloat16>(bf16_format);
  check_rounding<float16>(fp16_format);
}

BOOST_AUTO_TEST_CASE(named_values) {
  BOOST_TEST(bfloat16::from(1.0f).bits == 0x3f80);
  BOOST_TEST(float16::from(1.0f).bits == 0x3c00);
  BOOST_TEST(float16::from(65504.0f).bits == 0x7bff);                   // the largest float16
  BOOST_TEST(float16::from(65520.0f).bits == 0x7c00);                   // halfway to 65536: ties to even, inf
  BOOST_TEST(float16::from(std::ldexp(1.0f, -24)).bits == 0x0001);      // the smallest subnormal
  BOOST_TEST(float16::from(std::ldexp(1.0f, -25)).bits == 0x0000);      // half of it: ties to even, zero
  BOOST_TEST(float16::from(-std::ldexp(1.5f, -25)).bits == 0x8001);     // above half: rounds up, sign kept
  BOOST_TEST(bfloat16::from(-0.0f).bits == 0x8000);
  BOOST_TEST(bfloat16::from(std::numeric_limits<float>::max()).bits == 0x7f80);  // rounds to inf
  const float nan = -std::numeric_limits<float>::quiet_NaN();
  BOOST_TEST(std::isnan(float(bfloat16::from(nan))));
  BOOST_TEST(std::isnan(float(float16::from(nan))));
  BOOST_TEST(std::signbit(float(float16::from(nan))));
  const float snan = std::bit_cast<float>(0x7f800001u);  // a NaN whose payload would truncate to inf
  BOOST_TEST(std::isnan(float(bfloat16::from(snan))));
}

BOOST_AUTO_TEST_SUITE_END()
