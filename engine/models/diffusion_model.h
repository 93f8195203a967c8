#pragma once
// What a run trains: UNet + text encoder + tokenizer + noise schedule, saved as a
// diffusers-style folder (unet/, text_encoder/, tokenizer/, scheduler/) in the run's model/.

#include <string>
#include <vector>

#include "diffusion/noise_schedule.h"
#include "models/clip_text_model.h"
#include "models/unet_2d_condition.h"
#include "models/word_tokenizer.h"

namespace zs::models {

class DiffusionModel {
 public:
  /// The quickstart's tiny pixel-space model for `resolution`-pixel images, with a tokenizer
  /// built from `captions`. Weights come from `seed`.
  static DiffusionModel build_tiny(const std::vector<std::string>& captions, const std::string& prediction_type,
                                   std::uint64_t seed);
  /// A model folder written by save_folder() (configs and tokenizer; weights are loaded separately).
  static DiffusionModel load_folder(const std::string& dir);
  /// Writes unet/config.json, text_encoder/config.json, tokenizer/tokenizer.json and
  /// scheduler/scheduler_config.json under `dir` (no weights).
  void save_folder(const std::string& dir) const;

  /// Text conditioning for `captions`: [B, T, hidden] on `device`.
  at::Tensor encode_text(const std::vector<std::string>& captions, const at::Device& device);
  /// Every trained parameter, named "unet.<diffusers name>" and "text_encoder.<HF name>".
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  void to(const at::Device& device);
  void train(bool on);

  UNet2DConditionModel unet{nullptr};
  ClipTextModel text_encoder{nullptr};
  WordTokenizer tokenizer;
  diffusion::ScheduleConfig schedule;
};

}  // namespace zs::models
