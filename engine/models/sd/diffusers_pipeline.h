#pragma once
// A diffusers pipeline folder (model_index.json + one folder per component): which components
// it has, where their weights are (one file, or shards listed in *.safetensors.index.json;
// `fp16` variants when that is all there is) and loading each as ZeroStudio's module.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "diffusion/noise_schedule.h"
#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/clip_tokenizer.h"
#include "models/sd/model_source.h"
#include "models/sd/unet_2d_condition.h"

namespace zs::models {

struct PipelineComponent {
  std::string name;        ///< "unet", "vae", "text_encoder", …
  std::string library;     ///< "diffusers", "transformers"
  std::string class_name;  ///< "UNet2DConditionModel", …
};

class DiffusersPipeline : public ModelSource {
 public:
  /// Reads `root`/model_index.json. Throws zs::Error naming the file when it is missing or is not
  /// a pipeline index.
  static DiffusersPipeline open(const std::string& root);

  const std::string& root() const override { return root_; }
  const std::string& class_name() const { return class_name_; }
  const std::vector<PipelineComponent>& components() const { return components_; }
  bool has(const std::string& component) const override;
  std::string dir(const std::string& component) const;
  /// The component's safetensors files: `<base>.safetensors`, or the shards its
  /// `<base>.safetensors.index.json` names, else the same with the `fp16` variant. Empty when the
  /// component has no weights (tokenizer, scheduler). Throws naming the folder when weights are
  /// expected and absent (or only in .bin form, which is not read).
  std::vector<std::string> weight_files(const std::string& component) const;

  UNetConfig unet_config() const override;
  TensorLookup unet_weights() const override;
  AutoencoderKL load_vae() const override;
  ClipTextModel load_text_encoder(const std::string& component = "text_encoder") const override;
  ClipTokenizer load_tokenizer(const std::string& component = "tokenizer") const override;
  diffusion::ScheduleConfig load_scheduler() const override;

 private:
  std::string root_;
  std::string class_name_;
  std::vector<PipelineComponent> components_;
};

/// `zerostudio model info` of a pipeline folder: its class, then a line per component with its
/// parameters, dtypes, bytes and shards read from the weight files' headers, and for tokenizers
/// what `tokenizer_line` says (its exception's message when it throws). Returns the components
/// that could not be read (a missing or damaged shard, a broken tokenizer), each "NAME: why", so
/// that `model info` can keep the listing and still fail (see fail_unreadable).
std::vector<std::string> describe_pipeline(std::ostream& out, const DiffusersPipeline& p,
                                           const std::function<std::string(const PipelineComponent&)>& tokenizer_line);

/// Throws zs::Error(io) "ROOT: N component(s) could not be read: ..." when `unreadable` is not
/// empty (after the listing is written).
void fail_unreadable(const std::string& root, const std::vector<std::string>& unreadable);

}  // namespace zs::models
