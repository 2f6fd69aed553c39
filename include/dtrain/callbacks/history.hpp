#pragma once
/// \file
/// Keras `callbacks.History`: every epoch's logs, by name. `fit` returns one.

#include <map>
#include <string>
#include <vector>

#include "dtrain/callbacks/callback.hpp"

namespace dtrain {

class history : public callback {
 public:
  /// history.history["loss"][i] is the loss of the i-th epoch run.
  std::map<std::string, std::vector<float>> values;
  std::vector<int> epochs;

  const std::vector<float>& operator[](const std::string& key) const {
    auto it = values.find(key);
    if (it == values.end()) throw value_error("history: no entry named '" + key + "'");
    return it->second;
  }
  void on_train_begin(const logs&) override {
    values.clear();
    epochs.clear();
  }
  void on_epoch_end(int epoch, const logs& l) override {
    epochs.push_back(epoch);
    for (const auto& [k, v] : l) values[k].push_back(v);
  }
};

}  // namespace dtrain
