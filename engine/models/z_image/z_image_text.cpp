#include "models/z_image/z_image_text.h"

#include <algorithm>
#include <vector>

#include <ATen/ATen.h>

#include "core/error.h"
#include "models/qwen_text/qwen_tokenizer.h"

namespace zs::models {

std::string z_image_chat_text(const std::string& prompt) {
  return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n";
}

at::Tensor z_image_prompt_states(QwenTextModelImpl& model, const QwenTokenizer& tokenizer, const std::string& prompt,
                                 std::int64_t max_sequence_length, const at::Device& device, bool streamed) {
  for (const char* token : {"<|im_start|>", "<|im_end|>"})
    if (tokenizer.token_id(token) < 0)
      throw Error(ErrorKind::config, std::string("Z-Image prompt encoding: the tokenizer has no ") + token +
                                         " token; Z-Image needs Qwen3's tokenizer with its chat tokens");
  if (max_sequence_length < 1) throw Error(ErrorKind::config, "Z-Image prompt encoding: max_sequence_length must be at least 1");
  const std::int64_t layers = model.config().num_hidden_layers;
  if (layers < 1)
    throw Error(ErrorKind::config, "Z-Image prompt encoding: the text encoder has no layers (hidden_states[-2] needs one)");
  std::vector<std::int64_t> ids = tokenizer.encode(z_image_chat_text(prompt));
  ids.resize(std::min<std::size_t>(ids.size(), static_cast<std::size_t>(max_sequence_length)));
  const auto n = static_cast<std::int64_t>(ids.size());
  const at::Tensor t = at::tensor(ids, at::kLong).view({1, n});
  const at::Tensor mask = at::ones_like(t);
  const at::Tensor h = streamed ? model.forward_streamed(t, mask, device, layers - 1)
                                : model.hidden_state(t.to(device), mask.to(device), layers - 1);
  return h[0];
}

}  // namespace zs::models
