// The ring's frame headers: any 32 bytes against any expectation. Only an exact match is data, only an
// abort frame naming a rank of the world is an abort; everything else is refused with a reason.
#include <algorithm>
#include <cstring>

#include <dtrain/distribute/comm/ring_tcp.hpp>

#include "fuzz_input.hpp"

using namespace dtrain::comm::detail;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  frame_header h;
  struct {
    std::uint32_t seq, step, length;
    std::uint64_t offset;
    std::int32_t world;
  } e{};
  std::memcpy(&h, data, std::min(size, sizeof h));
  if (size > sizeof h) std::memcpy(&e, data + sizeof h, std::min(size - sizeof h, sizeof e));
  const int world = std::clamp(int(e.world), 1, 1 << 20);
  const frame_verdict v = check_frame(h, e.seq, e.step, e.offset, e.length, world);
  const bool exact = h.magic == frame_magic && h.seq == e.seq && h.step == e.step && h.offset == e.offset &&
                     h.length == e.length;
  const bool abort = h.magic == abort_magic && h.offset < std::uint64_t(world);
  if ((v.kind == frame_verdict::data) != exact || (v.kind == frame_verdict::abort) != abort) __builtin_trap();
  if (v.kind == frame_verdict::abort && (v.failed_rank < 0 || v.failed_rank >= world)) __builtin_trap();
  if (v.kind == frame_verdict::bad && v.why.empty()) __builtin_trap();
  return 0;
}
