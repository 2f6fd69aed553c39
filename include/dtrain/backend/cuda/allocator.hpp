#pragma once
/// \file
/// `cuda_detail::caching_allocator<Runtime>`: the CUDA backend's device memory, one per device and stream
/// (in cuda/context.hpp). Blocks are rounded to size classes and kept on free lists when released; an
/// allocation that finds the device full first lets the owner make room (issue what is recorded and wait
/// for it), then gives every cached block back and tries once more.

#include <algorithm>
#include <bit>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "dtrain/backend/cuda/runtime.hpp"

namespace dtrain::cuda_detail {

inline std::string mib(std::size_t bytes) {
  return std::to_string(bytes / (1024 * 1024)) + "." + std::to_string(bytes % (1024 * 1024) * 10 / (1024 * 1024)) +
         " MiB";
}

template <device_runtime Runtime>
class caching_allocator {
 public:
  explicit caching_allocator(Runtime& r) : runtime_(r) {}
  ~caching_allocator() { give_back_cached(); }
  caching_allocator(const caching_allocator&) = delete;
  caching_allocator& operator=(const caching_allocator&) = delete;

  /// Bytes a request of `bytes` occupies: size classes (powers of two from 512 B to 1 MiB, then
  /// multiples of 2 MiB) keep the free lists few.
  static std::size_t rounded(std::size_t bytes) {
    if (bytes <= (std::size_t{1} << 20)) return std::max<std::size_t>(512, std::bit_ceil(bytes));
    const std::size_t step = std::size_t{2} << 20;
    return (bytes + step - 1) / step * step;
  }
  /// `bytes` of device memory for `what` (named in the error when the device is full); `make_room()`
  /// runs before the cached blocks are given back (the device may still be using them).
  template <class MakeRoom>
  void* allocate(std::size_t bytes, const char* what, MakeRoom&& make_room) {
    std::lock_guard lock(mutex_);
    const std::size_t size = rounded(bytes);
    if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size, in_use_ += size;
      peak_ = std::max(peak_, in_use_);
      return p;
    }
    void* p = runtime_.allocate(size);
    if (!p) {  // give back every cached block (after the work that may use them) and try once more
      make_room();
      give_back_cached();
      p = runtime_.allocate(size);
    }
    if (!p) {
      const auto [free, total] = runtime_.memory_info();
      throw device_error(runtime_.describe() + ": out of memory allocating " + mib(size) + " for " + what + " (" +
                         mib(in_use_) + " in use by dtrain, " + mib(free) + " free of " + mib(total) + ")");
    }
    in_use_ += size;
    peak_ = std::max(peak_, in_use_);
    return p;
  }
  void release(void* p, std::size_t bytes) {
    if (!p) return;
    std::lock_guard lock(mutex_);
    const std::size_t size = rounded(bytes);
    free_[size].push_back(p);
    cached_ += size, in_use_ -= size;
  }
  std::size_t bytes_in_use() {
    std::lock_guard lock(mutex_);
    return in_use_;
  }
  std::size_t peak_bytes_in_use() {
    std::lock_guard lock(mutex_);
    return peak_;
  }

 private:
  void give_back_cached() {
    for (auto& [s, blocks] : free_)
      for (void* b : blocks) runtime_.deallocate(b);
    free_.clear();
    cached_ = 0;
  }

  Runtime& runtime_;
  std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0, in_use_ = 0, peak_ = 0;
};

}  // namespace dtrain::cuda_detail
