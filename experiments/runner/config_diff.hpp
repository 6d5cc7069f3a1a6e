/// @file
/// What differs between two configs, in the words of refusals: `attnlab run` against a run
/// directory of another config, `attnlab sweep` against a sweep directory whose runs would change.
/// Defined in config.cpp.
/// @ingroup runner
#pragma once
#include <string>

#include "experiments/runner/config.hpp"

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// Every key of `now`'s schema whose value differs between two configs, as
/// "'key' (OLD_NAME: a, NOW_NAME: b)" joined by ", "; "" when they are equal. A value whose meaning
/// the key's help gives ("0 = the task's default") carries it: "now: 0 = the task's default".
std::string config_differences(const Config& old, const Config& now, const std::string& old_name,
                               const std::string& now_name);

}  // namespace attnlab::runner
/// @}
