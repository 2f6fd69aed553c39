#pragma once
/// \file
/// `logs`: the ordered name -> value results of a step or an epoch (Keras' `logs` dict).

#include <charconv>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain {

namespace detail {
/// `v` in the shortest text that reads back as exactly `v`; not-a-number and infinities as Python
/// prints them (`nan`, `inf`, `-inf`), or, with `json`, as Python's json module reads them.
inline std::string full_precision(float v, bool json = false) {
  if (std::isnan(v)) return json ? "NaN" : "nan";
  if (std::isinf(v)) return std::string(v < 0 ? "-" : "") + (json ? "Infinity" : "inf");
  char b[32];
  const auto [end, ec] = std::to_chars(b, b + sizeof b, v);
  return std::string(b, end);
}
}  // namespace detail

class logs {
 public:
  using value_type = std::pair<std::string, float>;

  /// Sets `name` (appending it the first time, keeping the order).
  void set(const std::string& name, float v) {
    for (auto& [k, x] : items_)
      if (k == name) {
        x = v;
        return;
      }
    items_.emplace_back(name, v);
  }
  bool contains(const std::string& name) const {
    for (const auto& [k, x] : items_)
      if (k == name) return true;
    return false;
  }
  float at(const std::string& name) const {
    for (const auto& [k, x] : items_)
      if (k == name) return x;
    throw value_error("logs: no entry named '" + name + "'");
  }
  float operator[](const std::string& name) const { return at(name); }
  /// The value of the i-th entry (in order): for logs updated in place step after step.
  float& value_at(std::size_t i) { return items_.at(i).second; }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

 private:
  std::vector<value_type> items_;
};

}  // namespace dtrain
