#pragma once
/// \file
/// `cuda_detail::device_pointer<T>`: the CUDA backend's pointer type (`basic_cuda::pointer<T>`), an
/// address in device memory that converts to nothing on the host, and `raw`, which unwraps it into a
/// kernel argument.

#include <cstddef>
#include <type_traits>

namespace dtrain {

namespace cuda_detail {

/// An address in device memory: it converts to nothing on the host (the backend's kernels read it).
template <class T>
class device_pointer {
 public:
  device_pointer() = default;
  device_pointer(std::nullptr_t) {}
  explicit device_pointer(T* p) : p_(p) {}
  template <class U>
    requires std::is_same_v<const U, T> && (!std::is_same_v<U, T>)
  device_pointer(device_pointer<U> p) : p_(p.get()) {}
  device_pointer operator+(std::size_t n) const { return device_pointer(p_ + n); }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator!() const { return p_ == nullptr; }
  friend bool operator==(const device_pointer&, const device_pointer&) = default;
  /// The device address (not to be dereferenced on the host).
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

template <class T>
T* raw(device_pointer<T> p) {
  return p.get();
}
template <class T>
T raw(T v) {
  return v;
}

}  // namespace cuda_detail

}  // namespace dtrain
