#pragma once
// The backends the unit suite runs on, and helpers that move host vectors through a backend.
#include <tuple>
#include <vector>

#include <dtrain/backend/cpu.hpp>
#include <dtrain/backend/cuda/emulator.hpp>
#include <dtrain/backend/opaque.hpp>
#ifdef DTRAIN_TEST_GPU
#include <dtrain/backend/cuda.hpp>
#endif

namespace dtrain_test {

/// Every backend-parameterised test case runs once per backend here (BOOST_AUTO_TEST_CASE_TEMPLATE):
/// the cpu backend, the opaque one, whose memory no code can touch behind its back, and the CUDA
/// backend's code (kernels, recording, graphs) on the emulated device. The GPU suite (label `gpu`)
/// runs the same cases on `cuda`.
#ifdef DTRAIN_TEST_GPU
using backends = std::tuple<dtrain::cuda>;
#else
using backends = std::tuple<dtrain::cpu, dtrain::opaque, dtrain::cuda_emulated>;
#endif

/// A new buffer of backend B holding a copy of `v`.
template <class B>
dtrain::buffer_t<B, float> upload(const B& b, const std::vector<float>& v) {
  auto buf = b.template allocate<float>(v.size());
  b.upload(v.size(), v.data(), buf.data());
  return buf;
}

/// A host copy of the first `n` values of a buffer (all of it by default).
template <class B, class Buffer>
std::vector<typename Buffer::value_type> download(const B& b, const Buffer& buf, std::size_t n = std::size_t(-1)) {
  using T = typename Buffer::value_type;
  if (n == std::size_t(-1)) n = buf.size();
  std::vector<T> v(n);
  b.download(n, dtrain::pointer_t<B, const T>(buf.data()), v.data());
  return v;
}

/// A host copy of a model's parameters or gradients, whatever its backend.
inline std::vector<float> to_host(std::span<const float> s) { return {s.begin(), s.end()}; }
template <class T, class B>
std::vector<float> to_host(dtrain::device_span<T, B> s) {
  std::vector<float> v(s.size());
  s.device().download(s.size(), dtrain::pointer_t<B, const float>(s.data()), v.data());
  return v;
}

/// Model type M rebuilt on backend B.
template <class M, class B>
using on = typename M::template rebind<B>;

}  // namespace dtrain_test
