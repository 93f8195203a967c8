#pragma once
// Model folders for tests that need more than the sd15-tiny fixture (built with random weights).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/meta_tensors.h"
#include "models/param_unit.h"

namespace at {
class Tensor;
}

namespace zs::config {
struct TrainerConfig;
}

namespace zs::train {
struct RunSummary;
}

namespace zs::io {
class SafetensorsReader;
}

namespace torch::nn {
class Module;
}

namespace zs::models {
struct ClipTextConfig;
class UNet2DConditionModelImpl;
}

namespace zs::test {

/// Shapes-only model building (engine/core/meta_tensors.h).
using MetaTensorScope = zs::MetaTensorScope;

/// A run of `cfg` in `run_dir` on this thread (resuming `resume`: a checkpoint or "latest").
train::RunSummary run_training(const config::TrainerConfig& cfg, const std::string& run_dir, const std::string& resume = "");

/// Unit hooks that pass tensors through and record each call: "before N <x.size(1)>", "after N".
struct RecordingHooks : models::UnitHooks {
  std::vector<std::string> calls;
  at::Tensor before(std::size_t unit, const at::Tensor& x) override;
  at::Tensor after(std::size_t unit, const at::Tensor& y) override;
};

/// Each parameter's gradient of `module` against the golden file's "<prefix><name>" (a parameter
/// without a gradient counts as zeros), within `tolerance` · max(1, max|golden|): "" when all
/// match, else the first that does not and by how much. `checked` counts the parameters. A golden
/// with fewer rows than its gradient (a large one cut to keep a fixture small) is compared on its rows.
std::string gradients_differ(const torch::nn::Module& module, const io::SafetensorsReader& golden,
                             const std::string& prefix, double tolerance, std::size_t& checked);

/// `rel` under ../shared/fixtures.
std::string fixture_path(const std::string& rel);

/// max |a − b|, computed in float64.
double max_abs_diff(const at::Tensor& a, const at::Tensor& b);

/// The sd15-tiny fixture's UNet with its weights, every tensor loaded (throws otherwise); hold it
/// as a models::UNet2DConditionModel. Needs the shared fixtures.
std::shared_ptr<models::UNet2DConditionModelImpl> load_fixture_unet();

/// An OpenCLIP-style text tower (SDXL's second encoder) in Stable Diffusion's proportions: width
/// `hidden`, 4 × hidden MLP, 64-channel heads, gelu, with a `projection`-wide text projection.
/// ViT-bigG/14 is (1280, 32, 1280).
models::ClipTextConfig open_clip_config(std::int64_t hidden, std::int64_t layers, std::int64_t projection);

/// A tiny SDXL pipeline folder with random weights in Stable Diffusion's standard proportions
/// (group norm 32, 64-channel attention heads, so a single file of it infers the same configs):
/// an SDXL-shaped UNet (text_time add_embedding), a VAE, a CLIPTextModel and a
/// CLIPTextModelWithProjection; the sd15-tiny fixture's tokenizer twice (the second padding with
/// "!" as SDXL's tokenizer_2 does) and scheduler. Needs the shared fixtures.
void write_tiny_sdxl(const std::string& dir);

/// The end-to-end tests' small quickstart run (16 px, batch 8, 30 steps, 5 DDIM steps, EMA,
/// samples and checkpoints every 15 steps), with `extra` key=value settings on top.
config::TrainerConfig small_config(std::vector<std::string> extra = {});
/// A run directory's events.jsonl, one object a line.
std::vector<nlohmann::json> read_events(const std::string& run_dir);
/// The last checkpoint the events name ("" when none).
std::string checkpoint_dir(const std::vector<nlohmann::json>& events);
/// The losses of the metrics events, in order.
std::vector<double> losses(const std::vector<nlohmann::json>& events);

}  // namespace zs::test
