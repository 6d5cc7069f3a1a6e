/// @file
/// StopPointScope (experiment.cpp): the Trainer's scope around an evaluation for stop_point()
/// (experiment.hpp). Private to the runner: experiment.cpp and trainer.cpp include it.
/// @ingroup runner
#pragma once

/// @addtogroup runner
/// @{
namespace attnlab::runner {

/// Within its scope, stop_point() throws only for a signal that arrives after the scope began. The
/// Trainer opens one around each evaluation: a signal that arrived during the step lets that
/// step's evaluation run whole (the stop then happens before the next step, as it always has, so
/// a resumed run records every evaluation); one that arrives during the evaluation stops it.
class StopPointScope {
 public:
  StopPointScope();
  ~StopPointScope();
  StopPointScope(const StopPointScope&) = delete;
  StopPointScope& operator=(const StopPointScope&) = delete;

 private:
  int saved_;
};

}  // namespace attnlab::runner
/// @}
