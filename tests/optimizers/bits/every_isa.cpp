// Workers on different CPUs apply the same gradients and must hold the same weights: each instruction
// set this CPU has (the baseline's four floats, AVX2, AVX-512) gives the bits of the baseline, slots
// included, for every form of every optimizer's rule. A compiler contracting a product and a sum into
// one FMA where the target has FMA would break that (GCC does from -O2, Clang with -ffp-contract=fast):
// this program is built alone with those flags (tests/CMakeLists.txt), since two translation units
// built differently would each bring a copy of the same inline kernels and the linker keeps one.
#include <boost/test/unit_test.hpp>

#include <dtrain/dtrain.hpp>

#include "optimizers/update_inputs.hpp"

using namespace dtrain;

namespace {
constexpr std::size_t n = dtrain_test::update_n;
const auto values = dtrain_test::update_values;
}  // namespace

BOOST_AUTO_TEST_CASE(every_instruction_set_gives_the_same_bits) {
  std::vector<detail::cpu_isa> isas{detail::cpu_isa::baseline};
  if (detail::detected_cpu_isa() != detail::cpu_isa::baseline) isas.push_back(detail::cpu_isa::avx2);
  if (detail::detected_cpu_isa() == detail::cpu_isa::avx512) isas.push_back(detail::cpu_isa::avx512);
  if (isas.size() == 1) BOOST_TEST_MESSAGE("this CPU has neither AVX2 with FMA nor AVX-512: only the baseline runs");
  auto three_steps = [](const auto& o, std::size_t slots, detail::cpu_isa isa) {
    auto p = values(1, -1.0f, 1.0f);
    std::vector<float> s(slots * n);
    for (std::uint64_t t = 0; t < 3; ++t) detail::update_kernel(o, n, values(10 + t, -0.5f, 0.5f).data(), s.data(), p.data(), isa);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  auto check = [&](const char* what, const auto& o, std::size_t slots) {
    const auto base = three_steps(o, slots, detail::cpu_isa::baseline);
    for (auto isa : isas) BOOST_TEST(three_steps(o, slots, isa) == base, what << " on instruction set " << int(isa));
  };
  check("sgd", op::sgd{0.1f, 0.0f, false}, 0);
  check("sgd momentum", op::sgd{0.1f, 0.9f, false}, 1);
  check("sgd nesterov", op::sgd{0.1f, 0.9f, true}, 1);
  check("adam", op::adam{0.01f, 0.1f, 0.001f, 1e-7f, 1.0f, false}, 2);
  check("adamw amsgrad", op::adam{0.01f, 0.1f, 0.001f, 1e-7f, 0.999f, true}, 3);
  check("rmsprop", op::rmsprop{0.01f, 0.9f, 0.0f, 1e-7f, false}, 1);
  check("rmsprop centered momentum", op::rmsprop{0.01f, 0.9f, 0.5f, 1e-7f, true}, 3);
  check("adagrad", op::adagrad{0.01f, 0.1f, 1e-7f}, 1);
  check("adamax", op::adamax{0.01f, 0.1f, 0.999f, 1e-7f}, 2);
  check("nadam", op::nadam{0.01f, 0.1f, 0.001f, 1e-7f, 4.2f, 0.6f, 1000.0f}, 2);
  check("lion", op::lion{0.01f, 0.9f, 0.99f}, 1);
  check("ema", op::ema{0.99f, false}, 1);
  check("ema overwrite", op::ema{0.9f, true}, 1);
}
