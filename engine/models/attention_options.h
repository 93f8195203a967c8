#pragma once
// Which attention path runs (models/attention.h), without LibTorch's headers: the trainer, the
// config and the memory estimator decide with these.

#include <cstdint>
#include <string>

namespace zs::models {

enum class AttentionMode { automatic, plain, blocked };
enum class AttentionPath { plain, blocked, fused };

/// `training.attention`: "auto" | "plain" | "blocked". Throws std::invalid_argument otherwise.
AttentionMode parse_attention_mode(const std::string& name);
const char* attention_path_name(AttentionPath p);

/// Which path an attention call takes, and the blocked path's block sizes.
struct AttentionOptions {
  AttentionMode mode = AttentionMode::automatic;
  /// auto without a fused kernel: blocked when queries and keys both number at least this many
  /// (self-attention at 32×32 latents and up; cross-attention over 77 text tokens stays plain).
  /// From bench_attention on the CPU: blocked/plain time 0.16× at 1,024 tokens and 0.15× at
  /// 4,096 (the plain path first-touches its tokens² buffers), within noise of 1× at 256–768,
  /// and 1.2–2.7× for 77 keys.
  std::int64_t blocked_from_tokens = 1024;
  std::int64_t block_q = 0;  ///< queries per block; 0: from the budget below
  std::int64_t block_k = 0;  ///< keys per block; 0: min(Nk, 1024)
  /// Elements of one (batch·heads × block_q × block_k) score block, which sets block_q.
  std::int64_t block_elements = std::int64_t{1} << 21;
};

/// The blocked path's block sizes for `bh` (batch × heads) rows of Nq queries and Nk keys.
struct AttentionBlocks {
  std::int64_t q, k;
};
AttentionBlocks attention_blocks(const AttentionOptions& o, std::int64_t bh, std::int64_t nq, std::int64_t nk);

/// The path `o` picks for these shapes and this device.
AttentionPath choose_attention_path(const AttentionOptions& o, std::int64_t nq, std::int64_t nk, bool on_cuda);

}  // namespace zs::models
