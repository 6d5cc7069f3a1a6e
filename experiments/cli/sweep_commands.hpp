/// @file
/// The `sweep` and `report` subcommands of the attnlab CLI (docs/sweeps.md):
///   attnlab sweep SWEEP.toml [--out DIR] [--workers N] [--cores C] [--shard i/N] [--wait]
///   attnlab sweep SWEEP.toml --dry-run
///   attnlab sweep SWEEP.toml --emit-slurm [--shards N] [--cpus-per-task C] [--out DIR]
///   attnlab report DIR
///   attnlab claims [--root DIR] [--write]
/// @ingroup cli
#pragma once

/// @addtogroup cli
/// @{
namespace CLI {
class App;
}

namespace attnlab::cli {

/// Adds the three subcommands to `app`; when one of them runs (during app.parse), `status` receives its
/// exit status: 0 success, 1 a run failed, 3 the sweep was stopped by a signal (resumable).
/// Errors in the sweep file or directory are thrown as attnlab errors.
void add_sweep_commands(CLI::App& app, int& status);

}  // namespace attnlab::cli
/// @}
