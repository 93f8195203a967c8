// bench_quickstart_quality: trains configs/quickstart.yaml within a wall-clock budget, then
// samples every colour × shape prompt and scores the images automatically (colour of the shape
// region, and a fill-ratio shape test). Baselines measured in the same run: the untrained model
// (chance) and the scorer on the dataset's own images (its ceiling).
//
//   bench_quickstart_quality [--config FILE] [--budget-s 600] [--run-dir DIR] [--per-prompt 2] [--set K=V ...]
//   bench_quickstart_quality --score-only RUN_DIR [--config FILE]   (score a finished run again)
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <iostream>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sharded_state.h"
#include "config/config_loader.h"
#include "data/dataset.h"
#include "data/shapes.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "io/safetensors.h"
#include "models/model_family.h"
#include "models/trainable_model.h"
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

Score score_model(models::TrainableModel& model, const config::TrainerConfig& cfg, int per_prompt) {
  const auto specs = prompts_to_score();
  std::vector<std::string> prompts;
  for (const auto& s : specs) prompts.push_back(data::shape_caption(s));
  const at::Tensor images = train::sample_images(model, prompts, per_prompt, cfg.data.resolution, models::sampling_steps(cfg),
                                                 models::sampling_guidance(cfg), 1000, at::kCPU);
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
  std::string peer;  // a Python with the pinned peers: time quickstart-flux's (or -z-image's) step in diffusers too
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--config") config_path = v;
    else if (k == "--budget-s") budget = std::stod(v);
    else if (k == "--run-dir") run_dir = v;
    else if (k == "--per-prompt") per_prompt = std::stoi(v);
    else if (k == "--set") overrides.push_back(v);
    else if (k == "--peer") peer = v;
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
    // The run's model, as its family loads it (the UNet quickstart's or quickstart-flux's).
    const auto model_ptr = models::family_of(loaded.config).load_folder(run_dir + "/model", {});
    models::TrainableModel& model = *model_ptr;
    model.configure(loaded.config);
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
    if (!peer.empty()) {
      // The same architecture's training step in the pinned PyTorch + diffusers (bench/flux_step_peer.py,
      // bench/z_image_step_peer.py, bench/flux2_step_peer.py),
      // against this run's median s/step between logs (data loading included on our side).
      std::vector<double> ours;
      std::ifstream events(run_dir + "/events.jsonl");
      for (std::string line; std::getline(events, line);) {
        const auto e = nlohmann::json::parse(line);
        if (e.value("type", "") == "metrics" && e.contains("s_per_step")) ours.push_back(e["s_per_step"].get<double>());
      }
      if (ours.empty()) throw std::runtime_error("no metrics events to time the steps by");
      std::sort(ours.begin(), ours.end());
      const double mine = ours[ours.size() / 2];
      // The peer script of the config's architecture (bench/<family>_step_peer.py).
      const std::string& preset = loaded.config.model.preset;
      const std::string name = preset == "z-image-tiny" ? "z_image_step_peer.py"
                               : preset == "flux2-tiny" ? "flux2_step_peer.py"
                                                        : "flux_step_peer.py";
      const std::string script = (fs::path(config_path).parent_path().parent_path() / "bench" / name).string();
      FILE* p = popen((peer + " " + script + " 2>/dev/null").c_str(), "r");
      if (!p) throw std::runtime_error("cannot run " + peer);
      double theirs = 0;
      char buf[256];
      while (std::fgets(buf, sizeof buf, p)) std::sscanf(buf, "peer_step_s %lf", &theirs);
      pclose(p);
      if (theirs <= 0) throw std::runtime_error(peer + " " + script + " printed no peer_step_s");
      std::printf("step time: ZeroStudio %.4f s, the pinned PyTorch + diffusers %.4f s: %.2fx (goal >= 1.0)\n", mine,
                  theirs, theirs / mine);
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
