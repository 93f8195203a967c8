// bench_quickstart_quality: trains configs/quickstart.yaml within a wall-clock budget, then
// samples every colour × shape prompt and scores the images automatically (colour of the shape
// region, and a fill-ratio shape test). Baselines measured in the same run: the untrained model
// (chance) and the scorer on the dataset's own images (its ceiling).
//
//   bench_quickstart_quality [--config FILE] [--budget-s 600] [--run-dir DIR] [--per-prompt 2] [--set K=V ...]
//   bench_quickstart_quality --score-only RUN_DIR [--config FILE]   (score a finished run again)
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_state.h"
#include "config/config_loader.h"
#include "data/dataset.h"
#include "data/shapes.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "models/sd/diffusion_model.h"
#include "models/weights.h"
#include "train/image_logger.h"
#include "train/trainer.h"

#include "budget_run.h"

namespace fs = std::filesystem;
using namespace zs;

namespace {

struct Score {
  int n = 0, colour = 0, shape = 0, both = 0, background = 0;
  void print(const char* label) const {
    std::printf("%-28s n=%4d  colour %5.1f%%  shape %5.1f%%  both %5.1f%%  background %5.1f%%\n", label, n,
                100.0 * colour / n, 100.0 * shape / n, 100.0 * both / n, 100.0 * background / n);
  }
};

void add(Score& s, const data::ShapeSpec& want, const io::Image& img) {
  const auto r = data::read_shape_image(img);
  ++s.n;
  s.colour += r.colour == want.colour;
  s.shape += r.shape == want.shape;
  s.both += r.colour == want.colour && r.shape == want.shape;
  s.background += r.background == want.background;
}

/// Every shape × colour once per `per_prompt`, on a background that rotates through the palette.
std::vector<data::ShapeSpec> prompts_to_score() {
  std::vector<data::ShapeSpec> out;
  const auto& pal = data::shape_palette();
  std::size_t k = 0;
  for (const auto& shape : data::shape_kinds())
    for (std::size_t c = 0; c < pal.size(); ++c) {
      const std::size_t bg = (c + 1 + (k++ % (pal.size() - 1))) % pal.size();
      out.push_back({shape, pal[c].name, pal[bg].name});
    }
  return out;
}

Score score_model(models::DiffusionModel& model, const config::TrainerConfig& cfg, int per_prompt) {
  const auto specs = prompts_to_score();
  std::vector<std::string> prompts;
  for (const auto& s : specs) prompts.push_back(data::shape_caption(s));
  const at::Tensor images = train::sample_images(model, prompts, per_prompt, cfg.data.resolution, cfg.sampling.ddim_steps,
                                                 cfg.sampling.guidance_scale, 1000, at::kCPU);
  Score score;
  for (std::int64_t i = 0; i < images.size(0); ++i) add(score, specs[static_cast<std::size_t>(i / per_prompt)], train::to_image(images[i]));
  return score;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path = "configs/quickstart.yaml", run_dir = "build/bench_quickstart_run";
  double budget = 600;
  bool score_only = false;
  int per_prompt = 2;
  std::vector<std::string> overrides;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") config_path = v;
    else if (k == "--budget-s") budget = std::stod(v);
    else if (k == "--run-dir") run_dir = v;
    else if (k == "--per-prompt") per_prompt = std::stoi(v);
    else if (k == "--set") overrides.push_back(v);
    else if (k == "--score-only") {
      score_only = true;
      run_dir = v;
    }
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  try {
    auto loaded = config::load_config_file(config_path, overrides);
    if (score_only) loaded = config::load_config_file(run_dir + "/config.yaml");
    double secs = 0;
    std::int64_t last_step = 0;
    if (!score_only) {
    std::error_code ec;
    io::remove_tree(run_dir, ec);
    const bench::BudgetRun run = bench::train_within_budget(loaded.config, run_dir, budget);
    const auto& summary = run.summary;
    secs = run.seconds;
    last_step = summary.step;
    std::printf("trained %lld of %lld steps in %.0f s (budget %.0f s, dataset generation included), %s\n",
                static_cast<long long>(summary.step), static_cast<long long>(loaded.config.training.max_steps), secs,
                budget, summary.reason.c_str());
    }

    const auto ckpts = checkpoint::list_checkpoints(run_dir + "/checkpoints");
    if (ckpts.empty()) throw std::runtime_error("no checkpoint was written");
    if (score_only) last_step = ckpts.back().step;
    auto model = models::DiffusionModel::load_folder(run_dir + "/model");
    Score untrained = score_model(model, loaded.config, per_prompt);
    {
      // The trained weights, consolidated from the checkpoint's shards.
      const checkpoint::ShardReader shards(ckpts.back().path, ckpts.back().meta.at("sharding"));
      c10::NoGradGuard no_grad;
      for (auto& [name, p] : model.named_parameters()) p.copy_(shards.parameter(name, "weights"));
    }
    const Score trained = score_model(model, loaded.config, per_prompt);

    Score ceiling;
    const auto items = data::scan_dataset(run_dir + "/data");
    for (std::size_t i = 0; i < items.size() && i < 240; ++i)
      if (auto spec = data::parse_shape_caption(items[i].caption)) add(ceiling, *spec, io::read_image(items[i].image));

    ceiling.print("dataset images (ceiling)");
    untrained.print("untrained model (chance)");
    trained.print("trained model");
    std::printf("quickstart_quality: colour %.1f%% (%.1fx chance), both %.1f%% after %.0f s\n", 100.0 * trained.colour / trained.n,
                untrained.colour ? static_cast<double>(trained.colour) / untrained.colour : 0.0,
                100.0 * trained.both / trained.n, secs);
    std::printf("last samples: %s/samples/step_%lld/grid.png\n", run_dir.c_str(), static_cast<long long>(last_step));
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
