#pragma once
// FLUX.2 [klein]'s prompt encoding (diffusers' pipelines/flux2/pipeline_flux2_klein.py,
// Flux2KleinPipeline._get_qwen3_prompt_embeds) on Qwen3 (4B for klein 4B, 8B for klein 9B;
// models/qwen_text/qwen_text_model.h): the prompt as one user message in Qwen3's chat template with the
// generation prompt and thinking off (apply_chat_template(..., enable_thinking=False): an empty
// "<think>\n\n</think>\n\n" block follows "<|im_start|>assistant\n" — Z-Image's has none), tokenized,
// cut and right-padded to max_sequence_length with the pad token, through the text encoder with the
// padding masked as keys; hidden_states 9, 18 and 27 side by side per token, [h9 | h18 | h27]. The
// padded rows are kept: the transformer attends to all max_sequence_length of them.

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "models/qwen_text/qwen_text_model.h"

namespace zs::models {

class QwenTokenizer;

/// The pipeline's max_sequence_length default.
constexpr std::int64_t kFlux2MaxSequenceLength = 512;

/// Qwen3's chat template applied to one user message, with the generation prompt and thinking off.
std::string flux2_klein_chat_text(const std::string& prompt);

/// One prompt's states [max_sequence_length, layers.size()·hidden] on `device`. `streamed`: the
/// weights stay in CPU memory (forward_streamed's way). Throws zs::Error when the tokenizer lacks
/// Qwen3's chat tokens or the model has fewer layers than a stacked index needs.
at::Tensor flux2_klein_prompt_states(QwenTextModelImpl& model, const QwenTokenizer& tokenizer, const std::string& prompt,
                                     std::int64_t max_sequence_length, const at::Device& device, bool streamed = false,
                                     const std::vector<std::int64_t>& layers = {9, 18, 27});

}  // namespace zs::models
