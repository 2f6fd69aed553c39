#pragma once
/// \file
/// A ps task (TF's `tf.distribute.Server` of the "ps" job): it holds its share of the model's
/// variables and applies the optimizer to them.
///
/// The coordinator initialises it once (`init`: its regions of the parameter buffer, the compiled
/// optimizer's Keras config and the number of optimizer slots it restores, then the starting values and
/// those slots: a resumed job's); workers then `pull` the values at the start
/// of a step and `push` the step's gradients, which the task applies at once with its optimizer
/// (asynchronous training, as TF's: each push is one optimizer step on the values as they are). A push
/// names its step; a step already applied is not applied again (a step re-run elsewhere after its
/// worker failed), so each scheduled step updates each task once. Pulls and pushes are served
/// concurrently, one thread per connection, each whole under the task's lock, so a pull never sees half
/// an update. The coordinator reads the values and the optimizer's state (`state`) for its callbacks and
/// backups. The task ends when the coordinator sends `shutdown` or its connection drops.

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_set>
#include <vector>

#include "dtrain/checkpoint/compile_config.hpp"
#include "dtrain/distribute/ps/channel.hpp"

namespace dtrain::ps {

/// The largest init message (the regions and the optimizer config, as JSON).
inline constexpr std::uint64_t max_init_bytes = std::uint64_t{64} << 20;
/// The most optimizer slots per value a task takes (Adam with amsgrad has 3).
inline constexpr std::size_t max_slots = 8;

class server {
 public:
  /// Listens on `address` as task `id.me` (a ps task of `id.tasks`).
  server(endpoint_identity id, const std::string& address, std::function<void(const std::string&)> log)
      : id_(std::move(id)), log_(std::move(log)), listener_(id_, address, log_) {}

  /// Serves the job until the coordinator shuts it down (or its connection to this task drops, which
  /// is then a `comm_error`). `connect_timeout` bounds the wait for the coordinator's first connection.
  void join(std::chrono::milliseconds connect_timeout) {
    std::vector<std::thread> threads;
    const auto first_deadline = clock::now() + connect_timeout;
    while (!done_) {
      // after the coordinator came, tasks may connect as long as the job runs (a worker that restarts)
      const auto deadline = coordinator_seen_ ? clock::now() + std::chrono::hours(24 * 365) : first_deadline;
      auto c = listener_.accept([&](int task) { return task == 0 || task <= id_.tasks.workers; }, deadline);
      if (!c) break;
      if (c->peer() == id_.tasks.name(0)) coordinator_seen_ = true;
      auto ch = std::make_shared<channel>(std::move(*c));
      {
        std::lock_guard l(m_);
        open_.push_back(ch);
      }
      threads.emplace_back([this, ch] { serve(*ch); });
    }
    for (auto& t : threads) t.join();
    if (!coordinator_seen_)
      throw comm_error(id_.tasks.name(id_.me) + ": the coordinator (chief:0) did not connect within " +
                       std::to_string(connect_timeout.count() / 1000) + " s");
    if (!failure_.empty()) throw comm_error(id_.tasks.name(id_.me) + ": " + failure_);
  }

  /// Steps applied so far.
  std::uint64_t applied() const { return applied_; }

 private:
  void serve(channel& c) {
    const bool from_coordinator = c.peer() == id_.tasks.name(0);
    std::vector<float> grads;  // a push's, read before the lock is taken
    try {
      for (;;) {
        const message_header h = c.receive(std::max<std::uint64_t>(max_init_bytes, values_size() * sizeof(float) + 8));
        switch (message(h.kind)) {
          case message::init: initialise(c, h); break;
          case message::pull: {
            c.read_payload(h, {});
            std::lock_guard l(m_);
            require_initialised();
            const asio::const_buffer b = asio::buffer(values_.data(), values_bytes());
            c.send(message::values, std::span<const asio::const_buffer>(&b, 1));
            break;
          }
          case message::push: apply(c, h, grads); break;
          case message::state: {
            c.read_payload(h, {});
            std::lock_guard l(m_);
            require_initialised();
            const optimizer_state st = optimizer_.state();
            c.send(message::ok, nlohmann::json{{"iterations", st.iterations}, {"slots", slot_count(st)}}.dump());
            const asio::const_buffer parts[] = {asio::buffer(values_.data(), values_bytes()),
                                                asio::buffer(st.slots.data(), st.slots.size() * sizeof(float))};
            c.send(message::values, parts);
            break;
          }
          case message::stats: {
            c.read_payload(h, {});
            c.send(message::ok, nlohmann::json{{"applied", applied_.load()}}.dump());
            break;
          }
          case message::shutdown: {
            c.read_payload(h, {});
            c.send(message::ok);
            std::lock_guard l(m_);
            finish();
            return;
          }
          default:
            c.fail("sent a message of kind " + std::to_string(h.kind) + ", which a ps task does not serve");
        }
      }
    } catch (const connection_closed&) {
      if (from_coordinator && !done_) {  // the coordinator ended without ending the job: it failed
        std::lock_guard l(m_);
        failure_ = "the coordinator's connection closed before it ended the job";
        finish();
      }
    } catch (const std::exception& e) {
      // a worker's connection may drop (it failed; the coordinator re-runs its steps elsewhere), and so
      // may anyone's once the job is over; the coordinator's dropping ends the task with an error
      if (from_coordinator && !done_) {
        std::lock_guard l(m_);
        failure_ = std::string("the coordinator's connection failed: ") + e.what();
        finish();
      } else if (!done_) {
        log_(std::string(e.what()));
      }
    }
  }

  void initialise(channel& c, const message_header& h) {
    std::string text(h.length, '\0');
    c.read_payload(h, {asio::buffer(text)});
    std::lock_guard l(m_);
    if (initialised_) {  // a coordinator that restarted finds the values as they are
      c.send(message::ok, "initialised");
      return;
    }
    std::size_t slots = 0;
    optimizer_state st;
    try {
      const auto j = nlohmann::json::parse(text);
      optimizer_ = checkpoint::detail::optimizer_from(j.at("optimizer"));
      std::size_t n = 0;
      for (const auto& r : j.at("regions")) n += r.at("size").get<std::size_t>();
      values_.assign(n, 0.0f);
      slots = j.at("slots").get<std::size_t>();
      st.iterations = j.at("iterations").get<std::int64_t>();
      if (slots > max_slots) throw value_error(std::to_string(slots) + " optimizer slots");
    } catch (const std::exception& e) {
      c.fail("sent an init message that does not parse: " + std::string(e.what()));
    }
    c.send(message::ok, "new");
    st.slots.resize(slots * values_.size());
    const message_header v = c.receive(values_bytes() + st.slots.size() * sizeof(float));
    c.expect(v, message::values);
    c.read_payload(v, {asio::buffer(values_.data(), values_bytes()), asio::buffer(st.slots.data(), st.slots.size() * sizeof(float))});
    if (slots > 0 || st.iterations > 0) optimizer_.set_state(std::move(st));
    initialised_ = true;
    c.send(message::ok);
  }

  std::size_t slot_count(const optimizer_state& st) const { return values_.empty() ? 0 : st.slots.size() / values_.size(); }

  void apply(channel& c, const message_header& h, std::vector<float>& grads) {
    std::uint64_t step = 0;
    grads.resize(values_size());
    c.read_payload(h, {asio::buffer(&step, sizeof step), asio::buffer(grads.data(), grads.size() * sizeof(float))});
    std::lock_guard l(m_);
    require_initialised();
    if (applied_steps_.insert(step).second) {
      optimizer_.apply_gradients(std::span<const float>(grads), std::span<float>(values_));
      ++applied_;
    }
    c.send(message::ok, applied_.load());
  }

  void require_initialised() {
    if (!initialised_) throw comm_error("a worker reached " + id_.tasks.name(id_.me) + " before the coordinator initialised it");
  }
  /// Ends the task: no more connections, and every open one is closed (their threads return).
  void finish() {
    done_ = true;
    listener_.stop();
    for (auto& c : open_) c->interrupt();
  }
  std::size_t values_bytes() const { return values_.size() * sizeof(float); }
  /// How many values the task holds (0 before the coordinator initialised it).
  std::size_t values_size() {
    std::lock_guard l(m_);
    return values_.size();
  }

  endpoint_identity id_;
  std::function<void(const std::string&)> log_;
  listener listener_;
  std::mutex m_;
  bool initialised_ = false;
  std::vector<float> values_;
  std::vector<std::shared_ptr<channel>> open_;
  any_optimizer optimizer_;
  std::unordered_set<std::uint64_t> applied_steps_;
  std::atomic<std::uint64_t> applied_{0};
  std::atomic<bool> done_{false}, coordinator_seen_{false};
  std::string failure_;
};

}  // namespace dtrain::ps
