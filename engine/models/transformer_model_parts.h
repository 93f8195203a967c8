#pragma once
// What the flow-matching transformer families' models (models/flux/flux_model.h,
// models/qwen_image/qwen_image_model.h) share: the tiny presets' word tokenizer and small CLIP-style
// encoder, the run's model folder (transformer/ and scheduler/ configs, pipeline.json, the preset's
// base weights), and parked frozen parts brought back for one call.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "diffusion/flow_matching.h"
#include "models/clip_text_model.h"
#include "models/frozen_parking.h"
#include "models/param_unit.h"
#include "models/trainable_model.h"
#include "models/weights.h"
#include "models/word_tokenizer.h"

namespace zs::models {

/// The tiny presets' text encoder: a small CLIP text model (64 wide, 2 layers) over the word
/// tokenizer's vocabulary and frame.
ClipTextModel tiny_text_encoder(const WordTokenizer& tokenizer);

/// A tiny preset's tokenizer and encoder from a run's model folder (tokenizer/tokenizer.json,
/// text_encoder/config.json, and text_encoder/model.safetensors where save_tiny_base wrote it).
/// Throws zs::Error(checkpoint) naming the folder when the two disagree on the vocabulary.
void load_tiny_text(const std::string& dir, WordTokenizer& tokenizer, ClipTextModel& encoder);

/// A model folder's transformer/config.json (with `class_name`) and scheduler/scheduler_config.json.
void save_transformer_folder(const std::string& dir, nlohmann::json transformer_config, const char* class_name,
                             const diffusion::FlowScheduleConfig& schedule);
/// scheduler/scheduler_config.json of a model folder.
diffusion::FlowScheduleConfig read_folder_schedule(const std::string& dir);
/// A tiny preset's tokenizer and encoder config (save_folder) …
void save_tiny_text(const std::string& dir, const WordTokenizer& tokenizer, const ClipTextModel& encoder);
/// … and its base weights (save_base): transformer/diffusion_pytorch_model.safetensors, text_encoder/model.safetensors.
void save_tiny_base(const std::string& dir, const torch::nn::Module& transformer, const torch::nn::Module& encoder);

/// The pipeline folder a run's model folder names (pipeline.json's "path"), "" without one. Throws
/// zs::Error(checkpoint) naming pipeline.json when that folder is gone.
std::string pipeline_reference(const std::string& dir);

/// named_parameters() of a transformer family's model (Qwen-Image, Z-Image): "transformer.<name>",
/// then a tiny preset's encoder trained in full (`text`) as "text_encoder.<name>".
std::vector<std::pair<std::string, at::Tensor>> transformer_model_parameters(const torch::nn::Module& transformer,
                                                                             const ClipTextModel& tiny_text,
                                                                             TextEncoderTraining text);
/// text_encoder_modules() of such a model: the tiny preset's encoder as "text_encoder" (a
/// pipeline's frozen encoder is none of the optimizer's).
std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> tiny_text_modules(const ClipTextModel& tiny_text);
/// set_text_training()'s checks for such a model: a pipeline's encoder (`encoder`, "Z-Image's text
/// encoder (Qwen3-4B)") never trains, and the tiny preset's (`preset`) trains in full or not at
/// all; then its parameters' requires_grad. Throws zs::Error(config) naming training.train_text_encoder.
void set_tiny_text_training(TextEncoderTraining t, bool pipeline, const std::string& encoder, const std::string& preset,
                            const ClipTextModel& tiny_text);

/// Whether `dir` is a transformer family's tiny preset exported as a folder (its word tokenizer's
/// tokenizer.json and transformer/config.json of `transformer_class`, no model_index.json).
bool is_tiny_transformer_folder(const std::string& dir, const std::string& transformer_class);
/// Whether `path` is a diffusers folder of `pipeline_class` (model_index.json) or with a
/// transformer/config.json of `transformer_class`. Reads config files only.
bool is_transformer_pipeline(const std::string& path, const std::string& pipeline_class,
                             const std::string& transformer_class);

/// No gradients for any parameter of `m`.
void freeze(torch::nn::Module& m);
/// `units` with `prefix` before every parameter name ("transformer.").
std::vector<ParamUnit> prefixed_units(std::vector<ParamUnit> units, const std::string& prefix);
/// Bytes of the parameters of `parts`.
std::int64_t parameter_bytes(const std::vector<torch::nn::Module*>& parts);

/// Parked frozen parts on the compute device for one call and back to CPU memory after it (a
/// streamed part moves itself and is left where it is); counts the visit.
class FrozenVisit {
 public:
  FrozenVisit(FrozenParking& parking, std::vector<torch::nn::Module*> parts, const torch::nn::Module* streamed);
  ~FrozenVisit();
  FrozenVisit(const FrozenVisit&) = delete;
  FrozenVisit& operator=(const FrozenVisit&) = delete;

 private:
  std::vector<torch::nn::Module*> parts_;
  bool active_ = false;
};

}  // namespace zs::models
