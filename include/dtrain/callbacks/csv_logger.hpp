#pragma once
/// \file
/// Keras `callbacks.CSVLogger(filename)`: `csv_logger(file)` writes one row of logs per epoch (the chief
/// only).

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/callbacks/callback.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/logs.hpp"

namespace dtrain {

struct csv_logger_options {
  char separator = ',';
  bool append = false;
};

/// Keras `callbacks.CSVLogger(filename)`: one row per epoch, the epoch then the logs in sorted order
/// (Keras sorts the keys), every value in full precision, flushed as it is written. Under a strategy
/// only the chief writes (the logs are the same on every worker).
class csv_logger : public callback {
 public:
  explicit csv_logger(std::string filename, csv_logger_options o = {}) : file_(std::move(filename)), o_(o) {}
  void on_train_begin(const logs&) override {
    if (!model().is_chief()) return;
    const bool had = o_.append && std::ifstream(file_).good();
    out_ = std::make_shared<std::ofstream>(file_, o_.append ? std::ios::app : std::ios::trunc);
    if (!*out_) throw io_error("csv_logger: cannot open " + file_ + " for writing");
    header_written_ = had;
  }
  void on_epoch_end(int epoch, const logs& l) override {
    if (!out_) return;
    std::vector<std::pair<std::string, float>> sorted(l.begin(), l.end());
    std::sort(sorted.begin(), sorted.end());
    if (!header_written_) {
      *out_ << "epoch";
      for (const auto& [k, v] : sorted) *out_ << o_.separator << k;
      *out_ << '\n';
      header_written_ = true;
    }
    *out_ << epoch;
    for (const auto& [k, v] : sorted) *out_ << o_.separator << detail::full_precision(v);
    *out_ << '\n';
    out_->flush();
  }
  void on_train_end(const logs&) override { out_.reset(); }

 private:
  std::string file_;
  csv_logger_options o_;
  std::shared_ptr<std::ofstream> out_;
  bool header_written_ = false;
};

}  // namespace dtrain
