#include "models/attention_options.h"

#include <algorithm>
#include <stdexcept>

#include "core/torch_compat.h"

namespace zs::models {

AttentionMode parse_attention_mode(const std::string& name) {
  if (name == "auto") return AttentionMode::automatic;
  if (name == "plain") return AttentionMode::plain;
  if (name == "blocked") return AttentionMode::blocked;
  throw std::invalid_argument("training.attention: '" + name + "' is not one of auto, plain, blocked");
}

const char* attention_path_name(AttentionPath p) {
  switch (p) {
    case AttentionPath::plain: return "plain";
    case AttentionPath::blocked: return "blocked";
    case AttentionPath::fused: return "fused";
  }
  return "?";
}

AttentionBlocks attention_blocks(const AttentionOptions& o, std::int64_t bh, std::int64_t nq, std::int64_t nk) {
  const std::int64_t k = std::clamp<std::int64_t>(o.block_k > 0 ? o.block_k : 1024, 1, nk);
  const std::int64_t from_budget = std::max<std::int64_t>(16, o.block_elements / std::max<std::int64_t>(1, bh * k));
  const std::int64_t q = std::clamp<std::int64_t>(o.block_q > 0 ? o.block_q : from_budget, 1, nq);
  return {q, k};
}

AttentionPath choose_attention_path(const AttentionOptions& o, std::int64_t nq, std::int64_t nk, bool on_cuda) {
  switch (o.mode) {
    case AttentionMode::plain: return AttentionPath::plain;
    case AttentionMode::blocked: return AttentionPath::blocked;
    case AttentionMode::automatic: break;
  }
  if (compat::kHasFusedAttention && on_cuda) return AttentionPath::fused;
  // Cross-attention over a short context (77 CLIP tokens) keeps Nq × 77 probabilities, no more
  // than its inputs: the plain path is faster there (bench_attention: blocked 1.2-2.7×).
  return std::min(nq, nk) >= o.blocked_from_tokens ? AttentionPath::blocked : AttentionPath::plain;
}

}  // namespace zs::models
