#pragma once
/// \file
/// The ring's wire format: every frame starts with a fixed 32-byte header (magic, collective sequence
/// number, ring step, payload length, byte offset within the step, and without TLS the payload's
/// CRC-32C), checked against what the receiver expects BEFORE any payload is read, so a frame that does
/// not match is a protocol error, never an allocation; a payload whose checksum fails is one too. An
/// abort frame (its own magic) names the rank that failed; the rendezvous' address table has a third
/// magic. Host byte order (x86-64, arm64: little endian): all ranks must share it.

#include <cstdint>
#include <string>

#include "dtrain/core/crc32c.hpp"

namespace dtrain::comm::detail {

inline constexpr std::uint32_t frame_magic = 0x46525444;  // "DTRF"
inline constexpr std::uint32_t table_magic = 0x54525444;  // "DTRT"
inline constexpr std::uint32_t abort_magic = 0x41525444;  // "DTRA": a rank failed; offset = its rank

inline constexpr std::uint32_t frame_has_checksum = 1;  // frame_header::flags

struct frame_header {
  std::uint32_t magic = frame_magic;
  std::uint32_t seq = 0;   // collective number
  std::uint32_t step = 0;  // ring step within it
  std::uint32_t length = 0;
  std::uint64_t offset = 0;
  std::uint32_t checksum = 0;  // CRC-32C of the payload, where flags has frame_has_checksum
  std::uint32_t flags = 0;
};
static_assert(sizeof(frame_header) == 32);

/// What a received frame header is, checked against what the receiver expects next (collective `seq`,
/// ring `step`, byte `offset` within it, payload `length`) BEFORE any payload is read: data, an abort
/// naming the failed rank, or bad (with the reason). Nothing is ever sized from a header's claim.
struct frame_verdict {
  enum { data, abort, bad } kind = bad;
  int failed_rank = -1;  // abort: the rank that failed
  std::string why{};     // bad: what was expected
};
inline frame_verdict check_frame(const frame_header& h, std::uint32_t seq, std::uint32_t step, std::uint64_t offset,
                                 std::uint32_t length, int world_size) {
  if (h.magic == abort_magic && h.offset < std::uint64_t(world_size)) return {frame_verdict::abort, int(h.offset)};
  if (h.magic == frame_magic && h.seq == seq && h.step == step && h.offset == offset && h.length == length)
    return {frame_verdict::data};
  return {frame_verdict::bad, -1,
          "collective " + std::to_string(h.seq) + " step " + std::to_string(h.step) + " offset " + std::to_string(h.offset) +
              " length " + std::to_string(h.length) + "; expected collective " + std::to_string(seq) + " step " +
              std::to_string(step) + " offset " + std::to_string(offset) + " length " + std::to_string(length)};
}

}  // namespace dtrain::comm::detail
