#pragma once
// A model's frozen parts (text encoders, VAE) while cached outputs leave them idle
// (TrainableModel::park_frozen): whether they are parked, the device they visit when a call needs
// them (FrozenVisit), how often a call brought them back, and the captions encoded before they
// left (the sampling prompts), each caption's rows kept on the CPU. TrainableModel holds one.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "models/text_conditioning.h"

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
  /// Calls that brought parked parts back (TrainableModel::frozen_visits).
  std::int64_t visits() const { return visits_; }
  void count_visit() { ++visits_; }

 private:
  bool parked_ = false;
  std::int64_t visits_ = 0;
  at::Device device_ = at::kCPU;
  std::map<std::string, TextConditioning> remembered_;
};

}  // namespace zs::models
