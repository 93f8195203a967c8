#include "models/flux2/flux2_text.h"

#include <algorithm>

#include <ATen/ATen.h>

#include "core/error.h"
#include "models/qwen_text/qwen_tokenizer.h"

namespace zs::models {

std::string flux2_klein_chat_text(const std::string& prompt) {
  return "<|im_start|>user\n" + prompt + "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
}

at::Tensor flux2_klein_prompt_states(QwenTextModelImpl& model, const QwenTokenizer& tokenizer, const std::string& prompt,
                                     std::int64_t max_sequence_length, const at::Device& device, bool streamed,
                                     const std::vector<std::int64_t>& layers) {
  for (const char* token : {"<|im_start|>", "<|im_end|>", "<think>", "</think>"})
    if (tokenizer.token_id(token) < 0)
      throw Error(ErrorKind::config, std::string("FLUX.2 [klein] prompt encoding: the tokenizer has no ") + token +
                                         " token; FLUX.2 [klein] needs Qwen3's tokenizer with its chat tokens");
  if (max_sequence_length < 1)
    throw Error(ErrorKind::config, "FLUX.2 [klein] prompt encoding: max_sequence_length must be at least 1");
  for (const std::int64_t n : layers)
    if (n < 1 || n >= model.config().num_hidden_layers)
      throw Error(ErrorKind::config, "FLUX.2 [klein] prompt encoding: hidden state " + std::to_string(n) + " of a " +
                                         std::to_string(model.config().num_hidden_layers) +
                                         "-layer text encoder (FLUX.2 [klein] stacks 9, 18 and 27 of Qwen3's 36)");
  std::vector<std::int64_t> ids = tokenizer.encode(flux2_klein_chat_text(prompt));
  ids.resize(std::min<std::size_t>(ids.size(), static_cast<std::size_t>(max_sequence_length)));
  const auto n = static_cast<std::int64_t>(ids.size());
  ids.resize(static_cast<std::size_t>(max_sequence_length), tokenizer.pad_id());
  const at::Tensor t = at::tensor(ids, at::kLong).view({1, max_sequence_length});
  at::Tensor mask = at::zeros_like(t);
  mask.narrow(1, 0, n).fill_(1);
  const std::vector<at::Tensor> states = streamed ? model.hidden_states(t, mask, layers, device)
                                                  : model.hidden_states(t.to(device), mask.to(device), layers);
  return at::cat(states, -1)[0];
}

}  // namespace zs::models
