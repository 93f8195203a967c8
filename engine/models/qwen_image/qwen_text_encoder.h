#pragma once
// Qwen-Image's prompt encoding (diffusers' pipelines/qwenimage/pipeline_qwenimage.py,
// _get_qwen_prompt_embeds) on Qwen2.5-VL's language model (models/qwen_text/qwen_text_model.h):
// the prompt in the pipeline's template, the last hidden state, the template's system part dropped.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "models/qwen_text/qwen_text_model.h"

namespace zs::models {

class QwenTokenizer;

/// QwenImagePipeline's prompt template ("{}" stands for the prompt) and the number of its leading
/// tokens dropped (34: the system part up to "<|im_start|>user\n" in Qwen2.5-VL's vocabulary).
extern const char* const kQwenImagePromptTemplate;
constexpr std::int64_t kQwenImagePromptDrop = 34;
/// The pipeline's tokenizer_max_length: the tokenizer truncates at this + kQwenImagePromptDrop.
constexpr std::int64_t kQwenImageTokenizerMaxLength = 1024;

/// One prompt's kept states: the valid tokens after the dropped template prefix, truncated to
/// `max_sequence_length` ([n, hidden], n ≥ 1, on `device`), as encode_prompt returns them before
/// batch padding (with causal attention and right padding, a prompt's states do not depend on the
/// others in its batch). `streamed`: forward_streamed (the weights stay in CPU memory). Runs with
/// whatever grad mode the caller set.
at::Tensor qwen_image_prompt_states(QwenTextModelImpl& model, const QwenTokenizer& tokenizer,
                                    const std::string& prompt, std::int64_t max_sequence_length,
                                    const at::Device& device, bool streamed = false);

/// Batches per-prompt states as encode_prompt does: right-padded with zeros to the longest, and
/// the mask [B, L] (int64; 1 valid). Every prompt full → the mask is still returned (all ones).
std::pair<at::Tensor, at::Tensor> qwen_image_pad_states(const std::vector<at::Tensor>& states);

}  // namespace zs::models
