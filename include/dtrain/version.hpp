#pragma once
/// \file
/// dtrain's version (semantic versioning).

#define DTRAIN_VERSION_MAJOR 0
#define DTRAIN_VERSION_MINOR 1
#define DTRAIN_VERSION_PATCH 0

namespace dtrain {
inline constexpr const char* version = "0.1.0";
}  // namespace dtrain
