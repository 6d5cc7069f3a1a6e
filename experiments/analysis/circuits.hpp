/// @file
/// Circuit scores of attention heads on repeated random token sequences (Olsson et al. 2022,
/// "In-context Learning and Induction Heads"; Elhage et al. 2021, "A Mathematical Framework for
/// Transformer Circuits"; docs/analysis.md, "Previous-token and induction heads").
///
/// The probe sequence is K random tokens followed by the same K tokens again, s_0 .. s_{K-1}
/// s_0 .. s_{K-1} (distinct within a half when the vocabulary allows). On it, per head:
///   previous-token score: the mean over token positions n >= 1 of p[n, n - 1], the weight a
///     query puts on the token just before it;
///   induction (prefix-matching) score: the mean over the second half's queries n = K + j of
///     p[n, j + 1], the weight on the token that followed the earlier occurrence of the query's
///     token: the head that looks there is the one that predicts "what came next last time".
/// Each has a uniform baseline, the same mean for attention spread evenly over the keys each
/// query sees (causal: n + 1 keys). head_roles (statistics.hpp) gives a head the role
/// `previous_token` or `induction` when its score is >= 0.5 and at least 0.1 above its baseline
/// (RoleThresholds).
/// @ingroup analysis
#pragma once
#include <cstdint>
#include <vector>

#include "experiments/analysis/probe.hpp"
#include "tensor/random.hpp"

/// @addtogroup analysis
/// @{
namespace attnlab::analysis {

struct CircuitStats {
  int64_t examples = 0;            ///< repeated sequences measured; 0 = not measured
  int64_t half = 0;                ///< K
  HeadMatrix previous_token;       ///< [layer][head] mean p[n, n - 1]
  HeadMatrix induction;            ///< [layer][head] mean p[K + j, j + 1]
  double previous_uniform = 0;     ///< the uniform-attention baselines of the two means
  double induction_uniform = 0;
};

/// int64 (batch, 2 half): each row K = half tokens from [0, vocab) without pad_id (distinct when
/// vocab allows, else drawn with replacement) followed by the same K tokens. ValueError for
/// batch < 1, half < 2 or fewer than 2 usable token ids.
Tensor repeated_random_tokens(int64_t batch, int64_t half, int64_t vocab, int64_t pad_id, Generator& gen);

/// The scores from one forward's maps, one (B, h, N, N) per layer, and the axis tokens (B, N):
/// the repeated sequence starts at the first position whose token is >= 0 (after a CLS) and
/// occupies 2 half positions. causal: queries see keys m <= n (the baselines). ShapeError when a
/// map is not (B, h, N, N) with the tokens' B and N, or the tokens leave no room for 2 half.
CircuitStats circuit_scores(const std::vector<Tensor>& maps, const Tensor& axis_tokens, int64_t half, bool causal);

/// Runs `probe` (eval mode, no gradients) on `batch` repeated random sequences of 2 half tokens
/// from a vocabulary of `vocab` ids and scores every head. ValueError (from capture_attention) for
/// a layer without probabilities; ValueError when the probe's inputs are not tokens.
CircuitStats measure_circuits(const Probe& probe, int64_t batch, int64_t half, int64_t vocab, Generator& gen);

}  // namespace attnlab::analysis
/// @}
