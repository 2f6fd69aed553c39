#pragma once
/// \file
/// Pipeline stages, each a dataset over its upstream, applied with `|`:
/// shuffle, repeat, batch, unbatch, map, filter, take, skip, shard, prefetch, cache (memory or file),
/// with_options; the sources zip and from_generator (data/zip.hpp);
/// and `reduce`.
/// Semantics follow tf.data; where a seed would be random in TF it defaults to `default_seed` here.
///
/// Each stage is a header of its own (data/shuffle.hpp, data/repeat.hpp, data/batch.hpp, data/map.hpp,
/// data/filter.hpp, data/take_skip.hpp, data/shard.hpp, data/prefetch.hpp, data/cache.hpp,
/// data/with_options.hpp, data/reduce.hpp), built on data/stage_base.hpp; this header includes them all,
/// and the in-memory sources (data/sources.hpp) as it always did.

#include "dtrain/data/batch.hpp"
#include "dtrain/data/cache.hpp"
#include "dtrain/data/filter.hpp"
#include "dtrain/data/map.hpp"
#include "dtrain/data/prefetch.hpp"
#include "dtrain/data/reduce.hpp"
#include "dtrain/data/repeat.hpp"
#include "dtrain/data/shard.hpp"
#include "dtrain/data/shuffle.hpp"
#include "dtrain/data/sources.hpp"
#include "dtrain/data/stage_base.hpp"
#include "dtrain/data/take_skip.hpp"
#include "dtrain/data/with_options.hpp"
#include "dtrain/data/zip.hpp"
