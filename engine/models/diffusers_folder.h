#pragma once
// A diffusers pipeline folder (model_index.json + one folder per component): which components it
// has and where their weights are (one file, or shards listed in *.safetensors.index.json; `fp16`
// variants when that is all there is), and the shared components (VAE, CLIP) loaded. Every family
// that reads diffusers folders starts here; its own denoiser is the family's to load (SD:
// sd/diffusers_pipeline.h).

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "models/autoencoder_kl.h"
#include "models/clip_text_model.h"
#include "models/clip_tokenizer.h"

namespace zs::models {

struct PipelineComponent {
  std::string name;        ///< "unet", "vae", "text_encoder", …
  std::string library;     ///< "diffusers", "transformers"
  std::string class_name;  ///< "UNet2DConditionModel", …
};

class DiffusersFolder {
 public:
  /// Reads `root`/model_index.json. Throws zs::Error naming the file when it is missing or is not
  /// a pipeline index.
  static DiffusersFolder open(const std::string& root);

  const std::string& root() const { return root_; }
  const std::string& class_name() const { return class_name_; }
  const std::vector<PipelineComponent>& components() const { return components_; }
  bool has(const std::string& component) const;
  std::string dir(const std::string& component) const;
  /// The component's safetensors files: `<base>.safetensors`, or the shards its
  /// `<base>.safetensors.index.json` names, else the same with the `fp16` variant. Empty when the
  /// component has no weights (tokenizer, scheduler). Throws naming the folder when weights are
  /// expected and absent (or only in .bin form, which is not read).
  std::vector<std::string> weight_files(const std::string& component) const;

  /// The components every family of diffusers' reads alike, loaded whole from their folders:
  /// AutoencoderKL ("vae"), a CLIP text encoder and its tokenizer.
  AutoencoderKL load_vae() const;
  ClipTextModel load_text_encoder(const std::string& component = "text_encoder") const;
  ClipTokenizer load_tokenizer(const std::string& component = "tokenizer") const;

 private:
  std::string root_;
  std::string class_name_;
  std::vector<PipelineComponent> components_;
};

/// DiffusersFolder::weight_files of a component folder given by its path (a text_encoder/ folder
/// read on its own).
std::vector<std::string> component_weight_files(const std::string& folder);

/// `zerostudio model info` of a pipeline folder: its class, then a line per component with its
/// parameters, dtypes, bytes and shards read from the weight files' headers, and for tokenizers
/// what `tokenizer_line` says (its exception's message when it throws). Returns the components
/// that could not be read (a missing or damaged shard, a broken tokenizer), each "NAME: why", so
/// that `model info` can keep the listing and still fail (see fail_unreadable).
std::vector<std::string> describe_pipeline(std::ostream& out, const DiffusersFolder& p,
                                           const std::function<std::string(const PipelineComponent&)>& tokenizer_line);

/// Throws zs::Error(io) "ROOT: N component(s) could not be read: ..." when `unreadable` is not
/// empty (after the listing is written).
void fail_unreadable(const std::string& root, const std::vector<std::string>& unreadable);

}  // namespace zs::models
