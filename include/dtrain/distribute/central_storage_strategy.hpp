#pragma once
/// \file
/// `central_storage_strategy<B>`: TF's `CentralStorageStrategy`, synchronous training on the devices of
/// one process with the variables kept in one place. The replicas run as mirrored_strategy's (a thread
/// per compute device, the global batch split among them, their gradients summed); then the replica on
/// the parameter device alone applies the optimizer's update, to the only copy of the variables that has
/// optimizer state, and the other replicas read the new values before they go on (TF's replicas read the
/// central variables). The numbers are those of mirrored_strategy, bit for bit: the placement differs.
/// - cpu backend (the default): the compute devices are logical CPUs ("/cpu:0", "/cpu:1", ...) and the
///   variables live in host memory, as TF places them.
/// - GPU backend: the compute devices are GPUs; the parameter device is one of them (default: the first),
///   and the others read its variables through host memory. TF keeps them on the CPU when there are
///   several GPUs; dtrain's update runs where a model's memory is, so it asks for a GPU by name.
/// Everything else (`run`, `reduce`, the datasets, `make_model`, `fit`) is mirrored_strategy's.

#include <algorithm>
#include <string>
#include <vector>

#include "dtrain/distribute/mirrored_strategy.hpp"

namespace dtrain {

template <class B = cpu>
class central_storage_strategy final : public mirrored_strategy<comm::threads, B> {
  using base = mirrored_strategy<comm::threads, B>;

 public:
  /// Replicas on `compute_devices` (default: every GPU of a GPU backend, "/cpu:0" on the cpu), the
  /// variables on `parameter_device` (default: TF's, "/cpu:0" on the cpu, the first compute device on a
  /// GPU backend, where it must be one of them; replica 0 is then that device's).
  explicit central_storage_strategy(std::vector<std::string> compute_devices = {}, std::string parameter_device = {},
                                    communication_options o = {})
      : base(place(std::move(compute_devices), parameter_device), o, "central_storage_strategy", true),
        parameter_device_(parameter_device.empty() ? default_parameter_device() : std::move(parameter_device)) {}

  /// Where the variables are (TF's `strategy.extended.parameter_devices`, one device).
  const std::string& parameter_device() const { return parameter_device_; }

 private:
  std::string default_parameter_device() const {
    if constexpr (B::device == device_kind::gpu) return this->devices().front();
    else return "/cpu:0";
  }
  /// The compute devices with the parameter device's first (replica 0 holds the variables).
  static std::vector<std::string> place(std::vector<std::string> devices, const std::string& parameter_device) {
    if (parameter_device.empty()) return devices;
    const std::string who = "central_storage_strategy<" + std::string(B::name) + ">: parameter_device '" + parameter_device + "'";
    if constexpr (B::device != device_kind::gpu) {
      if (!detail::cpu_index(parameter_device))
        throw config_error(who + " is not the CPU (\"/cpu:0\"): this strategy's backend keeps everything in host memory");
      return devices;
    } else {
      if (detail::cpu_index(parameter_device))
        throw config_error(who + ": variables in host memory with GPU replicas are not supported; name one of the "
                           "compute devices (default: the first), whose replica then applies the update");
      const auto gpu = detail::gpu_index(parameter_device);
      if (!gpu) throw config_error(who + " is not a device name (\"/gpu:N\")");
      if (devices.empty())
        for (int i = 0; i < B::device_count(); ++i) devices.push_back("/gpu:" + std::to_string(i));
      const auto at = std::find_if(devices.begin(), devices.end(), [&](const std::string& d) { return detail::gpu_index(d) == gpu; });
      if (at == devices.end()) throw config_error(who + " is not one of the compute devices");
      std::rotate(devices.begin(), at, at + 1);
      return devices;
    }
  }

  std::string parameter_device_;
};

static_assert(strategy<central_storage_strategy<>>);

}  // namespace dtrain
