/// @file
/// Two costs of an attention layer at sequence length N, for plotting what a variant can do
/// against what it spends (the `recall` experiment, docs/experiments.md "recall"):
///
///   attention_state_per_token   numbers the layer keeps, per token of an N-token context, to
///                               answer a further query: the decoding cache of make_cache /
///                               forward_step (its numel() after N positions, / N) where the
///                               variant has one, else the summary its forward attends to
///   attention_density           allowed (query, key) pairs / N^2 of the layer's self-attention
///
/// Both are per layer and independent of the batch.
/// @ingroup attention
#pragma once
#include <cstdint>

#include "nn/attention/attention.hpp"

/// @addtogroup attention
/// @{
namespace attnlab::nn {

/// Per variant family (h heads, dk, dv, the variant's own sizes):
///   mha, talking_heads, collaborative, diff, synthesizer, mla, local, linear, performer,
///   retention: cache->numel() / N after forward_step over N positions of the layer's own decoding
///     cache (mha: 2 g dk with g kv heads; mla: r + dr; local: min(N, s + w) h (dk + dv) / N;
///     linear: h dk (dv + 1) / N; performer: h F (dv + 1) / N; retention: h dk dv / N)
///   lsh, sinkhorn, bigbird, longformer: every key and value, h (dk + dv) (their non-causal forward
///     reads all of them: lsh's keys are its normalised queries, still one dk vector a position)
///   linformer: the projected keys and values, h k (dk + dv) / N
///   nystrom: the landmark keys and the landmark summary Z (Bm V), h m (dk + dv) / N
/// Runs in eval mode without gradients; the layer's train mode is restored. ValueError from the
/// layer's forward_step for a variant without a rule above that cannot decode causally.
double attention_state_per_token(Attention& attention, int64_t n);

/// The fraction of the N x N (query, key) pairs that the layer's self-attention may weight,
/// causal keeping m <= n:
///   fixed patterns (local, sparse_strided, sparse_fixed, dilated): pairs counted by allows();
///   sinkhorn: 2b / N (each query block scores its own block and one sorted block of b slots;
///     the sorted block is a P-weighted mix of the blocks, so the count is of score slots);
///   variants that return attention weights (mha, lsh, bigbird, longformer, ...): nonzero
///     weights of a forward with need_weights over a fixed N(0, 1) input, averaged over heads
///     (lsh's buckets depend on the input: this is its count on that input);
///   the rest (linformer, which returns no weights): every pair, as for dense attention.
/// Runs in eval mode without gradients; the layer's train mode is restored.
double attention_density(Attention& attention, int64_t n, bool causal = false);

/// Whether the variant weights only some (query, key) pairs by construction (a window, blocks,
/// buckets, clusters or sorted blocks: local, dilated, sparse_strided, sparse_fixed, longformer,
/// bigbird, lsh, routing, sinkhorn), so that its density says whether it is sparse at a given N.
/// The others mix every pair (softmax over all keys, or a kernel or low-rank summary of all of
/// them): their density is 1 by design and says nothing.
bool attention_restricts_pairs(const Attention& attention);

}  // namespace attnlab::nn
/// @}
