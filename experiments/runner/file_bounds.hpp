/// @file
/// The size bound of each kind of file the runner reads whole (docs/io.md, "Files read whole").
/// Every such read goes through read_text(path, bound): a regular file only (a link to /dev/zero
/// or a FIFO is refused before reading), no larger than its kind's bound (checked with stat
/// first, so an 8 GiB sparse config.toml is refused at once). The bounds are far above what a
/// run writes: a config of a few KB, records of a few KB, one metrics line of ~100 bytes per
/// logged step (a million logged steps fit), a results table of one row per run.
/// @ingroup runner
#pragma once
#include <cstdint>

/// @addtogroup runner
/// @{
namespace attnlab::runner {

inline constexpr int64_t kMiB = int64_t(1) << 20;

/// config.toml, a --config file, sweep.toml, a project's own settings files.
inline constexpr int64_t kConfigFileBound = 4 * kMiB;
/// summary.json, meta.json, failure.json, point.json, analysis.json.
inline constexpr int64_t kRecordFileBound = 16 * kMiB;
/// metrics.jsonl.
inline constexpr int64_t kMetricsFileBound = 512 * kMiB;
/// results.csv, claims.csv, measured tables, a README or doc that claims --write rewrites.
inline constexpr int64_t kTableFileBound = 64 * kMiB;

}  // namespace attnlab::runner
/// @}
