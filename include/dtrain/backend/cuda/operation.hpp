#pragma once
/// \file
/// What the CUDA backend records instead of issuing (cuda/context.hpp): `cuda_detail::operation`, one kernel
/// launch (with its own copy of the argument bytes), GEMM or upload; `copy_arguments`, which copies a
/// launch's arguments typed by the kernel's host signature; and `replays`, whether a graph captured from
/// one segment can replay another.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dtrain/backend/cuda/kernels.hpp"
#include "dtrain/backend/cuda/runtime.hpp"

namespace dtrain {

namespace cuda_detail {

template <class F>
struct signature;
template <class... P>
struct signature<void (*)(P...)> {
  using params = std::tuple<P...>;
};

struct operation;
template <cuda_kernels::kernel K>
void copy_arguments(void* const* args, operation& out);

/// One recorded operation of a segment.
struct operation {
  enum class type : std::uint8_t { kernel, gemm, upload } what{};
  cuda_kernels::kernel k{};
  unsigned grid = 0, block = 0;
  std::uint8_t arg_count = 0;
  std::uint16_t arg_bytes = 0;
  std::array<std::uint16_t, 16> offsets{};
  alignas(16) std::array<std::byte, 192> args{};
  gemm_call gemm{};
  void* dst = nullptr;
  const void* src = nullptr;
  std::size_t bytes = 0;

  /// The argument pointers a launch takes (into this operation's own copy).
  std::array<void*, 16> arg_pointers() {
    std::array<void*, 16> p{};
    for (std::size_t i = 0; i < arg_count; ++i) p[i] = args.data() + offsets[i];
    return p;
  }
  bool same_arguments(const operation& o) const {
    return arg_bytes == o.arg_bytes && grid == o.grid && block == o.block &&
           std::memcmp(args.data(), o.args.data(), arg_bytes) == 0;
  }
  /// Whether a graph captured from `o` can replay this (kernel arguments patched).
  bool replays(const operation& o) const {
    if (what != o.what) return false;
    switch (what) {
      case type::kernel: return k == o.k && arg_count == o.arg_count;
      case type::gemm: return gemm == o.gemm;
      case type::upload: return dst == o.dst && src == o.src && bytes == o.bytes;
    }
    return false;
  }
};

/// Copies the arguments of kernel K (typed by its host copy's signature) from a launch's argument
/// array into `out`, each at its alignment.
template <cuda_kernels::kernel K>
void copy_arguments(void* const* args, operation& out) {
  using params = typename signature<std::remove_const_t<decltype(cuda_kernels::host_function<K>)>>::params;
  static_assert(std::tuple_size_v<params> <= 16);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    std::size_t at = 0;
    auto put = [&]<class P>(std::size_t i, const P* value) {
      static_assert(std::is_trivially_copyable_v<P>);
      at = (at + alignof(P) - 1) / alignof(P) * alignof(P);
      std::memcpy(out.args.data() + at, value, sizeof(P));
      out.offsets[i] = static_cast<std::uint16_t>(at);
      at += sizeof(P);
    };
    (put(I, static_cast<const std::tuple_element_t<I, params>*>(args[I])), ...);
    out.arg_count = static_cast<std::uint8_t>(sizeof...(I));
    out.arg_bytes = static_cast<std::uint16_t>(at);
  }(std::make_index_sequence<std::tuple_size_v<params>>{});
}

/// copy_arguments for a kernel known at run time.
inline void copy_arguments(cuda_kernels::kernel k, void* const* args, operation& out) {
  static constexpr void (*copiers[])(void* const*, operation&) = {
#define DTRAIN_CUDA_COPIER_(k) &copy_arguments<cuda_kernels::kernel::k>,
      DTRAIN_CUDA_KERNEL_LIST(DTRAIN_CUDA_COPIER_)
#undef DTRAIN_CUDA_COPIER_
  };
  copiers[static_cast<int>(k)](args, out);
}

inline bool replays(const std::vector<operation>& now, const std::vector<operation>& before) {
  if (now.size() != before.size()) return false;
  for (std::size_t i = 0; i < now.size(); ++i)
    if (!now[i].replays(before[i])) return false;
  return true;
}

}  // namespace cuda_detail

}  // namespace dtrain
