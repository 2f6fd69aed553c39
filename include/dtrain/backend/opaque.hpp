#pragma once
/// \file
/// `opaque`: a test backend whose memory cannot be reached from outside it. Its pointers are handles (an
/// allocation and an offset): they do not convert to host pointers and cannot be dereferenced or indexed
/// (each attempt fails to compile, saying why). Every kernel first checks that each range it touches (its
/// row's extents in backend/kernel_table.hpp) lies inside its allocation, then runs the cpu backend's
/// kernel on it, so results are the cpu backend's, bit for bit. Code that compiles and passes its tests on
/// `opaque` touches no memory behind its backend's back and stays inside its buffers: it runs on any
/// backend that keeps the contract.
/// Not part of dtrain.hpp; include it to check a layer, loss or model of your own.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "dtrain/backend/backend.hpp"
#include "dtrain/backend/cpu.hpp"
#include "dtrain/backend/kernel_table.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {

class opaque {
  struct allocation {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t size;  // elements
  };

 public:
  static constexpr const char* name = "opaque";
  static constexpr device_kind device = device_kind::cpu;

  /// An element of an allocation: no `*`, `[]` or conversion to a host pointer.
  template <class T>
  class pointer {
   public:
    pointer() = default;
    pointer(std::nullptr_t) {}
    template <class U>
      requires std::is_same_v<const U, T> && (!std::is_same_v<U, T>)
    pointer(pointer<U> p) : a_(p.a_), offset_(p.offset_) {}

    pointer operator+(std::size_t n) const { return pointer(a_, offset_ + n); }
    explicit operator bool() const { return a_ != nullptr; }
    bool operator!() const { return a_ == nullptr; }
    friend bool operator==(const pointer&, const pointer&) = default;

    T& operator*() const {
      static_assert(sizeof(T) == 0, "opaque backend: backend memory was dereferenced; call the backend's kernels");
      return *static_cast<T*>(nullptr);
    }
    T& operator[](std::size_t) const {
      static_assert(sizeof(T) == 0, "opaque backend: backend memory was indexed; call the backend's kernels");
      return *static_cast<T*>(nullptr);
    }
    template <class U>
    operator U*() const {
      static_assert(sizeof(U*) == 0, "opaque backend: backend memory was used as a host pointer; call the backend's kernels");
      return nullptr;
    }

   private:
    friend class opaque;
    template <class>
    friend class pointer;
    pointer(allocation* a, std::size_t offset) : a_(a), offset_(offset) {}
    allocation* a_ = nullptr;
    std::size_t offset_ = 0;
  };

  template <class T>
  class buffer {
   public:
    using value_type = T;
    buffer() = default;
    explicit buffer(std::size_t n) {
      if (n) a_.reset(new allocation{std::unique_ptr<std::byte[]>(new std::byte[n * sizeof(T)]), n});
    }
    pointer<T> data() const { return pointer<T>(a_.get(), 0); }
    std::size_t size() const { return a_ ? a_->size : 0; }

   private:
    std::unique_ptr<allocation> a_;
  };

  template <class T>
  buffer<T> allocate(std::size_t n) const {
    return buffer<T>(n);
  }
  template <class T>
  void upload(std::size_t n, const T* host, pointer<T> p) const {
    cpu_.upload(n, host, raw(p, n, "upload"));
  }
  template <class T>
  void download(std::size_t n, pointer<T> p, std::remove_const_t<T>* host) const {
    cpu_.download(n, raw(p, n, "download"), host);
  }
  void synchronize() const {}
  /// The cpu backend's reduced-precision GEMMs, behind the same checks.
  opaque with_gemm_dtype(dtype d) const {
    opaque o = *this;
    o.cpu_ = cpu_.with_gemm_dtype(d);
    return o;
  }

  // ---- every kernel: the range checks of its row in backend/kernel_table.hpp, then the cpu kernel ------
#define DTRAIN_OPAQUE_ARG(kernel, p) DTRAIN_OPAQUE_ARG_(kernel, DTRAIN_KERNEL_TABLE_UNPACK p)
#define DTRAIN_OPAQUE_ARG_(...) DTRAIN_OPAQUE_ARG__(__VA_ARGS__)
#define DTRAIN_OPAQUE_ARG__(kernel, kind, ...) DTRAIN_OPAQUE_ARG_##kind(kernel, __VA_ARGS__)
#define DTRAIN_OPAQUE_ARG_V(kernel, type, name) name
#define DTRAIN_OPAQUE_ARG_P(kernel, element, name, extent) raw(name, extent, #kernel " " #name)
#define DTRAIN_OPAQUE_KERNEL(head, targs, result, name, ...)                                                   \
  DTRAIN_KERNEL_TABLE_UNPACK head result name(DTRAIN_KERNEL_TABLE_MAP(DTRAIN_KERNEL_PARAM, , __VA_ARGS__)) const { \
    return cpu_.name DTRAIN_KERNEL_TABLE_UNPACK targs(DTRAIN_KERNEL_TABLE_MAP(DTRAIN_OPAQUE_ARG, name, __VA_ARGS__)); \
  }
  DTRAIN_ALL_KERNELS(DTRAIN_OPAQUE_KERNEL)
#undef DTRAIN_OPAQUE_KERNEL
#undef DTRAIN_OPAQUE_ARG_P
#undef DTRAIN_OPAQUE_ARG_V
#undef DTRAIN_OPAQUE_ARG__
#undef DTRAIN_OPAQUE_ARG_
#undef DTRAIN_OPAQUE_ARG

 private:
  /// Elements a row-major operand spans: op(M) is rows x cols, stored transposed or not.
  static std::size_t matrix(transpose t, std::size_t rows, std::size_t cols, std::size_t ld) {
    if (t == transpose::yes) std::swap(rows, cols);
    return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
  }
  /// The rows embedding_backward's index lists hold (the last of its vocab + 1 starts)...
  static std::size_t embedding_rows(pointer<const std::uint32_t> starts, std::size_t vocab) {
    return raw(starts, vocab + 1, "embedding_backward starts")[vocab];
  }
  /// ...and the rows of dy they name.
  static std::size_t embedding_dy_rows(pointer<const std::uint32_t> order, pointer<const std::uint32_t> starts,
                                       std::size_t vocab) {
    const std::size_t rows = embedding_rows(starts, vocab);
    const std::uint32_t* o = raw(order, rows, "embedding_backward order");
    std::size_t dy_rows = 0;
    for (std::size_t k = 0; k < rows; ++k) dy_rows = std::max<std::size_t>(dy_rows, std::size_t(o[k]) + 1);
    return dy_rows;
  }
  /// The host address of [p, p + n), after checking that the range lies inside p's allocation.
  template <class T>
  static T* raw(pointer<T> p, std::size_t n, const char* what) {
    if (n == 0) return nullptr;
    if (!p) throw error(std::string("opaque backend: ") + what + " reads or writes " + std::to_string(n) +
                        " elements through a null pointer");
    if (p.offset_ > p.a_->size || n > p.a_->size - p.offset_)
      throw error(std::string("opaque backend: ") + what + " touches elements [" + std::to_string(p.offset_) + ", " +
                  std::to_string(p.offset_ + n) + ") of an allocation of " + std::to_string(p.a_->size));
    using element = std::remove_const_t<T>;
    return reinterpret_cast<element*>(p.a_->bytes.get()) + p.offset_;
  }

  cpu cpu_;
};

static_assert(backend<opaque>);

}  // namespace dtrain
