#pragma once
// A model's frozen parts (text encoders, VAE) while cached outputs leave them idle
// (TrainableModel::park_frozen): whether they are parked, the device they visit when a call needs
// them (FrozenVisit), and the captions encoded before they left (the sampling prompts), each
// caption's rows kept on the CPU. Every family's model holds one.

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "models/trainable_model.h"

namespace zs::models {

class FrozenParking {
 public:
  bool parked() const { return parked_; }
  /// Where the parked parts run when visited (the device they were parked from).
  const at::Device& device() const { return device_; }
  /// Encodes each caption of `remember` not known yet (`encode`, while the parts are still on
  /// `device`) and keeps its rows on the CPU, then `send_away` moves the parts off the device and
  /// they count as parked. Nothing when they are parked already.
  void park(const at::Device& device, const std::vector<std::string>& remember,
            const std::function<TextConditioning(const std::string&)>& encode, const std::function<void()>& send_away);
  /// Each caption's remembered rows (CPU) when parked and every caption is known; empty otherwise
  /// (then the encoders have to run).
  std::vector<const TextConditioning*> recall(const std::vector<std::string>& captions) const;

 private:
  bool parked_ = false;
  at::Device device_ = at::kCPU;
  std::map<std::string, TextConditioning> remembered_;
};

}  // namespace zs::models
