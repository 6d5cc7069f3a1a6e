/// @file
/// <attnlab/runner.hpp>: everything an experiment file needs (docs/experiments.md): registration
/// (register_experiment, Experiment, RunContext), the config schema (Schema, Config), the Trainer,
/// the tasks (add_task_keys, TaskData) and data loaders, the model builders of
/// experiments/models (models::add_model_keys, build_classifier, build_lm, evaluate_classifier),
/// and the core and attention
/// registry through <attnlab/attnlab.hpp>. Link attnlab::experiments.
/// @ingroup runner
#pragma once
#include "attnlab.hpp"
#include "experiments/data/loader.hpp"
#include "experiments/models/models.hpp"
#include "experiments/runner/config.hpp"
#include "experiments/runner/experiment.hpp"
#include "experiments/runner/task.hpp"
#include "experiments/runner/trainer.hpp"
