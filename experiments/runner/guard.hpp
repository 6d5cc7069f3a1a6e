/// @file
/// The guard around a program's main body (docs/cli.md, "Exit status"): an exception that escapes
/// becomes one line on stderr, "PROGRAM: message", and an exit status, never an abort.
///
///   int main(int argc, char** argv) {
///     return attnlab::runner::guarded("char_lm", [&] { ...; return 0; });
///   }
///
/// Header-only and free of the runner's libraries, so every executable can use it (the attnlab
/// tool, experiments/*.cpp, the tutorials).
/// @ingroup runner
#pragma once
#include <cstdio>
#include <exception>

#include "tensor/error.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// A mistake in a program's command line, as opposed to a failure while running.
struct UsageError : ValueError {
  using ValueError::ValueError;
};

/// The exit statuses guarded() returns for an exception: 1 a failure, 2 a usage error.
enum GuardStatus : int { kGuardFailed = 1, kGuardUsage = 2 };

/// body() -> int, the exit status. A UsageError is exit status 2 (with a hint to try --help);
/// any other exception 1.
template <class Body>
int guarded(const char* program, Body&& body) noexcept {
  try {
    return body();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s (try %s --help)\n", program, e.what(), program);
    return kGuardUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return kGuardFailed;
  } catch (...) {
    std::fprintf(stderr, "%s: unknown error\n", program);
    return kGuardFailed;
  }
}

}  // namespace attnlab::runner
/// @}
