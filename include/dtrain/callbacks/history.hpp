#pragma once
/// \file
/// Keras `callbacks.History`: every epoch's logs, by name. `fit` returns one; `h.history["loss"]` as in
/// Keras, and `to_json()` for the Python side (`json.load` gives Keras' `history.history` dict).

#include <map>
#include <string>
#include <vector>

#include "dtrain/callbacks/callback.hpp"

namespace dtrain {

class history : public callback {
 public:
  /// history["loss"][i] is the loss of the i-th epoch run (Keras' `history.history`).
  std::map<std::string, std::vector<float>> history;
  std::vector<int> epochs;

  const std::vector<float>& operator[](const std::string& key) const {
    auto it = history.find(key);
    if (it == history.end()) throw value_error("history: no entry named '" + key + "'");
    return it->second;
  }
  void on_train_begin(const logs&) override {
    history.clear();
    epochs.clear();
  }
  void on_epoch_end(int epoch, const logs& l) override {
    epochs.push_back(epoch);
    for (const auto& [k, v] : l) history[k].push_back(v);
  }
  /// `{"loss": [...], ...}`, every value in full precision (shortest round-trip form).
  std::string to_json() const {
    std::string s = "{";
    for (const auto& [k, v] : history) {
      s += (s.size() > 1 ? ", \"" : "\"") + k + "\": [";
      for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + detail::full_precision(v[i], true);
      s += "]";
    }
    return s + "}";
  }
};

}  // namespace dtrain
