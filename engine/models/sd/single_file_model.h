#pragma once
// A Stable Diffusion single-file checkpoint (`.safetensors` in the original LDM layout, as
// A1111 and ComfyUI use): model.diffusion_model.* (UNet), first_stage_model.* (VAE) and
// cond_stage_model.transformer.* (SD 1.x) or conditioner.embedders.{0,1}.* (SDXL). The names
// map through models/sd/single_file_names.h, the configs are inferred from the tensor shapes (or
// taken from a companion diffusers folder), and since such a file carries no vocabulary the
// tokenizers come from that companion folder.

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <vector>
#include <string>

#include "models/sd/model_source.h"

namespace zs::io {
class SafetensorsReader;
}

namespace zs::models {

/// What a single file holds, from its header alone.
struct SingleFileInfo {
  std::string family;  ///< "sd1" (SD 1.x: one CLIP ViT-L) or "sdxl" (CLIP ViT-L + OpenCLIP ViT-bigG)
  UNetConfig unet;
  AutoencoderKLConfig vae;
  ClipTextConfig text_encoder;
  ClipTextConfig text_encoder_2;  ///< SDXL only
  /// Per component, where its config came from: "inferred from shapes" or a config.json path.
  std::map<std::string, std::string> config_sources;
};

class SingleFileModel : public ModelSource {
 public:
  /// Opens `path` and reads its header. `config_path`: a diffusers folder of the same family
  /// (its tokenizer/ and tokenizer_2/, and its unet/vae/text_encoder*/config.json and scheduler
  /// where present; absent configs are inferred from shapes, with Stable Diffusion's standard
  /// group norm (32) and heads (SD 1.x: 8; SDXL: 64 channels each)), or a folder holding just
  /// vocab.json and merges.txt. Throws zs::Error naming the file or key when `path` is not a
  /// Stable Diffusion 1.x / SDXL single file (SD 2.x's OpenCLIP ViT-H encoder is refused).
  static SingleFileModel open(const std::string& path, const std::string& config_path = "");
  ~SingleFileModel() override;
  SingleFileModel(SingleFileModel&&) noexcept;

  const std::string& root() const override { return path_; }
  const SingleFileInfo& info() const { return info_; }
  bool has(const std::string& component) const override;
  UNetConfig unet_config() const override { return info_.unet; }
  TensorLookup unet_weights() const override;
  /// The base's load, then a check that the file has no UNet tensors the architecture lacks.
  UNet2DConditionModel load_unet(const UnitBuilt& on_unit = {}) const override;
  AutoencoderKL load_vae() const override;
  ClipTextModel load_text_encoder(const std::string& component) const override;
  ClipTokenizer load_tokenizer(const std::string& component) const override;
  diffusion::ScheduleConfig load_scheduler() const override;
  /// Parameters per component ("unet", "vae", "text_encoder", "text_encoder_2") from the header.
  std::map<std::string, std::int64_t> parameter_counts() const;

 private:
  SingleFileModel() = default;
  std::string path_, config_path_;
  std::unique_ptr<io::SafetensorsReader> reader_;
  std::shared_ptr<std::set<std::string>> requested_ = std::make_shared<std::set<std::string>>();  // UNet names read
  SingleFileInfo info_;
};

/// The folder in `config_path` (a single file's companion) that holds `component`'s CLIP
/// tokenizer files: `component`/, else tokenizer/, else the folder itself. Throws zs::Error
/// naming model.config_path when it has no vocab.json there. A `tokenizer_2` read from a folder
/// other than its own pads with "!" (SDXL's second tokenizer does).
std::string companion_tokenizer_dir(const std::string& config_path, const std::string& component);

/// Infers the configs of a single file's components from its tensor names and shapes.
SingleFileInfo infer_single_file(const io::SafetensorsReader& reader);
/// The same from names and shapes alone (`source` names the file in errors).
SingleFileInfo infer_single_file(const std::map<std::string, std::vector<std::int64_t>>& shapes, const std::string& source);

}  // namespace zs::models
