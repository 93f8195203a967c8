#include "models/frozen_parking.h"

namespace zs::models {

namespace {

at::Tensor on_cpu(const at::Tensor& t) { return t.defined() ? t.cpu() : at::Tensor(); }

}  // namespace

void FrozenParking::park(const at::Device& device, const std::vector<std::string>& remember,
                         const std::function<TextConditioning(const std::string&)>& encode,
                         const std::function<void()>& send_away) {
  if (parked_) return;
  for (const auto& caption : remember) {
    if (remembered_.count(caption)) continue;
    const TextConditioning one = encode(caption);
    remembered_[caption] = {on_cpu(one.context), on_cpu(one.pooled), on_cpu(one.mask)};
  }
  device_ = device;
  send_away();
  parked_ = true;
}

std::vector<const TextConditioning*> FrozenParking::recall(const std::vector<std::string>& captions) const {
  std::vector<const TextConditioning*> out;
  if (!parked_ || captions.empty()) return out;
  for (const auto& c : captions) {
    const auto it = remembered_.find(c);
    if (it == remembered_.end()) return {};
    out.push_back(&it->second);
  }
  return out;
}

}  // namespace zs::models
