#pragma once
/// \file
/// `logs`: the ordered name -> value results of a step or an epoch (Keras' `logs` dict).

#include <string>
#include <utility>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain {

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
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  std::size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

 private:
  std::vector<value_type> items_;
};

}  // namespace dtrain
