#include "models/qwen_image/qwen_text_encoder.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "core/error.h"
#include "models/qwen_text/qwen_tokenizer.h"

namespace zs::models {

const char* const kQwenImagePromptTemplate =
    "<|im_start|>system\nDescribe the image by detailing the color, shape, size, texture, quantity, text, spatial "
    "relationships of the objects and background:<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n";

// ---- QwenImagePipeline's prompt encoding ----

at::Tensor qwen_image_prompt_states(QwenTextModelImpl& model, const QwenTokenizer& tokenizer, const std::string& prompt,
                                    std::int64_t max_sequence_length, const at::Device& device, bool streamed) {
  std::string text = kQwenImagePromptTemplate;
  text.replace(text.find("{}"), 2, prompt);  // Python's str.format with one "{}"
  std::vector<std::int64_t> ids = tokenizer.encode(text);
  // The tokenizer truncates (right) at tokenizer_max_length + drop.
  ids.resize(std::min<std::size_t>(ids.size(), static_cast<std::size_t>(kQwenImageTokenizerMaxLength + kQwenImagePromptDrop)));
  const auto n = static_cast<std::int64_t>(ids.size());
  if (n <= kQwenImagePromptDrop)
    throw Error(ErrorKind::config, "Qwen-Image prompt encoding: the tokenizer gives " + std::to_string(n) +
                                       " tokens for the prompt template, no more than the " +
                                       std::to_string(kQwenImagePromptDrop) + " dropped; is it Qwen2.5-VL's tokenizer?");
  if (max_sequence_length < 1) throw Error(ErrorKind::config, "Qwen-Image prompt encoding: max_sequence_length must be at least 1");
  const at::Tensor t = at::tensor(ids, at::kLong).view({1, n});
  const at::Tensor mask = at::ones_like(t);
  const at::Tensor h = streamed ? model.forward_streamed(t, mask, device) : model.forward(t.to(device), mask.to(device));
  return h[0].narrow(0, kQwenImagePromptDrop, std::min(n - kQwenImagePromptDrop, max_sequence_length));
}

std::pair<at::Tensor, at::Tensor> qwen_image_pad_states(const std::vector<at::Tensor>& states) {
  if (states.empty()) throw Error(ErrorKind::data, "Qwen-Image prompt encoding: no prompt states to batch");
  std::int64_t longest = 0;
  for (const auto& s : states) longest = std::max(longest, s.size(0));
  const auto b = static_cast<std::int64_t>(states.size());
  at::Tensor out = at::zeros({b, longest, states.front().size(1)}, states.front().options());
  at::Tensor mask = at::zeros({b, longest}, states.front().options().dtype(at::kLong));
  for (std::int64_t i = 0; i < b; ++i) {
    const at::Tensor& s = states[static_cast<std::size_t>(i)];
    out[i].narrow(0, 0, s.size(0)).copy_(s);
    mask[i].narrow(0, 0, s.size(0)).fill_(1);
  }
  return {out, mask};
}

}  // namespace zs::models
