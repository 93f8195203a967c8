#pragma once
// Z-Image's prompt encoding (diffusers' pipelines/z_image/pipeline_z_image.py, _encode_prompt) on
// Qwen3-4B (models/qwen_text/qwen_text_model.h): the prompt as one user message in Qwen3's chat
// template with the generation prompt and thinking on (apply_chat_template(..., add_generation_prompt
// =True, enable_thinking=True): nothing follows "<|im_start|>assistant\n"), tokenized and cut at
// max_sequence_length tokens, through the text encoder; the states of the prompt's tokens after all
// but its last layer (hidden_states[-2]: no final norm, and the last layer's weights never used).

#include <cstdint>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "models/qwen_text/qwen_text_model.h"

namespace zs::models {

class QwenTokenizer;

/// The pipeline's max_sequence_length default: template and prompt together are cut at this many tokens.
constexpr std::int64_t kZImageMaxSequenceLength = 512;

/// Qwen3's chat template applied to one user message, with the generation prompt (thinking on).
std::string z_image_chat_text(const std::string& prompt);

/// One prompt's states [n, hidden] on `device` (n ≥ 1: the template's tokens, then the prompt's,
/// cut at `max_sequence_length`), as _encode_prompt returns them per prompt (with causal
/// attention and right padding, a prompt's states do not depend on the others in its batch nor on
/// the padding to max_sequence_length). `streamed`: forward_streamed (the weights stay in CPU
/// memory). Throws zs::Error when the tokenizer lacks Qwen3's chat tokens or the model has no layer.
at::Tensor z_image_prompt_states(QwenTextModelImpl& model, const QwenTokenizer& tokenizer, const std::string& prompt,
                                 std::int64_t max_sequence_length, const at::Device& device, bool streamed = false);

}  // namespace zs::models
