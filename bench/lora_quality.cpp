// bench_lora_quality: does a LoRA learn something new without forgetting? Starting from a
// quickstart model (trained here within --base-budget-s, or --base-run DIR of a finished
// quickstart run), it trains LoRA adapters on the UNet and the text encoder for --budget-s on
// shapes in cyan, a colour the quickstart never saw, captioned "a cyan circle on a black
// background", mixed 1:1 with the quickstart's own colours (prior preservation). The quickstart's
// word tokenizer has no "cyan": the word reads as its unknown token, which no quickstart caption
// contains, and the text encoder's adapters learn what it means (the vocabulary is not extended,
// so the adapted model stays a LoRA of the same base). Scored with the quickstart's scorer and a
// palette that knows cyan:
//   new colour: the share of cyan prompts whose samples show a cyan shape (pass mark 70 %);
//   old colours: the quickstart prompts' colour score with the adapters, against the base's
//                (baseline measured in the same run; pass mark 90 % of it).
// The adapters are read back from the run's exported LoRA file (lora-diffusers), so the export
// is on the path.
//
//   bench_lora_quality [--base-run DIR] [--base-budget-s 600] [--budget-s 240] [--rank 8]
//                      [--work-dir build/bench_lora] [--per-prompt 2] [--set K=V ...]
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <random>

#include <ATen/ATen.h>

#include "checkpoint/checkpoint.h"
#include "config/config_loader.h"
#include "data/shapes.h"
#include "io/atomic_file.h"
#include "io/image.h"
#include "models/lora.h"
#include "models/sd/diffusion_model.h"
#include "models/sd/lora_file.h"
#include "train/checkpoint_export.h"
#include "train/image_logger.h"
#include "train/trainer.h"

#include "budget_run.h"

namespace fs = std::filesystem;
using namespace zs;

namespace {

constexpr const char* kNewColour = "cyan";

/// The demo palette and the bench's own colour.
std::vector<data::PaletteColour> extended_palette() {
  std::vector<data::PaletteColour> p = data::shape_palette();
  p.push_back({kNewColour, {0, 200, 210}});
  return p;
}

/// `count` images in the flat-files layout: every other one a cyan shape, the rest the
/// quickstart's colours, on any other palette background.
void write_lora_dataset(const std::string& dir, int count, int size) {
  const auto palette = extended_palette();
  const auto& kinds = data::shape_kinds();
  fs::create_directories(dir + "/images");
  fs::create_directories(dir + "/captions");
  std::mt19937_64 rng(7);
  for (int i = 0; i < count; ++i) {
    const std::size_t old_colours = palette.size() - 1;
    const std::size_t fg = i % 2 == 0 ? old_colours : rng() % old_colours;
    std::size_t bg = rng() % old_colours;
    if (bg == fg) bg = (bg + 1) % old_colours;
    const data::ShapeSpec spec{kinds[rng() % kinds.size()], palette[fg].name, palette[bg].name};
    char stem[32];
    std::snprintf(stem, sizeof stem, "%05d", i);
    io::write_png(dir + "/images/" + stem + ".png", data::draw_shape(spec, size, rng(), palette));
    io::write_file_atomic(dir + "/captions/" + stem + ".txt", data::shape_caption(spec) + "\n");
  }
}

struct Score {
  int n = 0, colour = 0, shape = 0;
  double colour_share() const { return n ? static_cast<double>(colour) / n : 0; }
};

/// Samples `per_prompt` images of each spec and reads them back with the extended palette.
Score score(models::DiffusionModel& model, const std::vector<data::ShapeSpec>& specs, const config::TrainerConfig& cfg,
            int per_prompt) {
  std::vector<std::string> prompts;
  for (const auto& s : specs) prompts.push_back(data::shape_caption(s));
  const at::Tensor images = train::sample_images(model, prompts, per_prompt, cfg.data.resolution, models::sampling_steps(cfg),
                                                 models::sampling_guidance(cfg), 1000, at::kCPU);
  const auto palette = extended_palette();
  Score s;
  for (std::int64_t i = 0; i < images.size(0); ++i) {
    const auto& want = specs[static_cast<std::size_t>(i / per_prompt)];
    const auto r = data::read_shape_image(train::to_image(images[i]), palette);
    ++s.n;
    s.colour += r.colour == want.colour;
    s.shape += r.shape == want.shape;
  }
  return s;
}

/// Every shape in `colours`, each on two backgrounds that rotate through the old palette.
std::vector<data::ShapeSpec> specs_for(const std::vector<std::string>& colours) {
  const auto& old = data::shape_palette();
  std::vector<data::ShapeSpec> out;
  std::size_t k = 0;
  for (const auto& shape : data::shape_kinds())
    for (const auto& colour : colours)
      for (int b = 0; b < 2; ++b) {
        std::string bg = old[k++ % old.size()].name;
        if (bg == colour) bg = old[k++ % old.size()].name;
        out.push_back({shape, colour, bg});
      }
  return out;
}

std::string last_checkpoint(const std::string& run_dir) {
  const auto list = checkpoint::list_checkpoints(run_dir + "/checkpoints");
  if (list.empty()) throw std::runtime_error(run_dir + ": no checkpoint was written");
  return list.back().path;
}

}  // namespace

int main(int argc, char** argv) {
  std::string base_run, work = "build/bench_lora";
  double base_budget = 600, budget = 240;
  int rank = 8, per_prompt = 2;
  std::vector<std::string> overrides;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--base-run") base_run = v;
    else if (k == "--base-budget-s") base_budget = std::stod(v);
    else if (k == "--budget-s") budget = std::stod(v);
    else if (k == "--rank") rank = std::stoi(v);
    else if (k == "--work-dir") work = v;
    else if (k == "--per-prompt") per_prompt = std::stoi(v);
    else if (k == "--set") overrides.push_back(v);
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  try {
    const std::string quickstart = "configs/quickstart.yaml";
    std::error_code ec;
    // 1. The base: a quickstart run (trained here unless given), exported as a model folder.
    double base_secs = 0;
    if (base_run.empty()) {
      base_run = work + "/base_run";
      io::remove_tree(base_run, ec);
      const auto cfg = config::load_config_file(quickstart).config;
      const bench::BudgetRun base = bench::train_within_budget(cfg, base_run, base_budget);
      base_secs = base.seconds;
      std::printf("base: quickstart trained %lld of %lld steps in %.0f s\n", static_cast<long long>(base.summary.step),
                  static_cast<long long>(cfg.training.max_steps), base_secs);
    }
    const std::string base_model = work + "/base_model";
    io::remove_tree(base_model, ec);
    checkpoint::ExportOptions eo;
    eo.format = "diffusers";
    train::export_checkpoint(last_checkpoint(base_run), base_model, eo);

    // 2. The LoRA run on cyan shapes (and the old colours), from the base.
    const std::string data_dir = work + "/lora_data", lora_run = work + "/lora_run";
    io::remove_tree(data_dir, ec);
    io::remove_tree(lora_run, ec);
    auto base_cfg = config::load_config_file(quickstart).config;
    write_lora_dataset(data_dir, 2048, static_cast<int>(base_cfg.data.resolution));
    std::vector<std::string> sets = {"model.path=" + base_model,
                                     "data.path=" + data_dir,
                                     "data.generate=none",
                                     "training.method=lora",
                                     "training.train_text_encoder=lora",
                                     "lora.rank=" + std::to_string(rank),
                                     "lora.targets=[to_q, to_k, to_v, to_out.0, ff.net.0.proj, ff.net.2]",
                                     "training.max_steps=100000",
                                     "optimizer.lr=0.002",
                                     "scheduler.type=constant",
                                     "scheduler.warmup_steps=0",
                                     "sampling.prompts=[a cyan circle on a black background, a cyan square on a red background]",
                                     "checkpointing.every_n_steps=100"};
    sets.insert(sets.end(), overrides.begin(), overrides.end());
    const auto lora_cfg = config::load_config_file(quickstart, sets).config;
    const bench::BudgetRun lora_run_result = bench::train_within_budget(lora_cfg, lora_run, budget);
    const std::int64_t lora_steps = lora_run_result.summary.step;
    const double lora_secs = lora_run_result.seconds;
    std::printf("LoRA: rank %d on the UNet's attention and feed-forward and the text encoder's attention, %lld steps in "
                "%.0f s\n", rank, static_cast<long long>(lora_steps), lora_secs);

    // 3. The adapters as a LoRA file, read back onto the base.
    const std::string lora_file = work + "/cyan_lora.safetensors";
    checkpoint::ExportOptions lo;
    lo.format = "lora-diffusers";
    lo.dtype = at::kFloat;
    train::export_checkpoint(last_checkpoint(lora_run), lora_file, lo);
    auto model = models::DiffusionModel::load_folder(base_model);
    model.train(false);
    const std::size_t adapted = checkpoint::read_lora_file(
        lora_file, {{models::LoraPart::unet, model.unet.ptr().get()}, {models::LoraPart::text_encoder, model.text_encoder.ptr().get()}},
        model.unet->config(), false);
    std::printf("LoRA file %s: %zu adapted layers, %.2f MB\n", lora_file.c_str(), adapted,
                static_cast<double>(fs::file_size(lora_file)) / 1e6);

    // 4. Scores: the new colour with the adapters; the old prompts with and without them.
    std::vector<std::string> old_colours;
    for (const auto& c : data::shape_palette()) old_colours.emplace_back(c.name);
    const auto new_specs = specs_for({kNewColour}), old_specs = specs_for(old_colours);
    const Score new_adapted = score(model, new_specs, base_cfg, per_prompt);
    const Score old_adapted = score(model, old_specs, base_cfg, per_prompt);
    models::set_lora_enabled(*model.unet, false);  // the base alone: the baseline of the same run
    models::set_lora_enabled(*model.text_encoder, false);
    const Score new_base = score(model, new_specs, base_cfg, per_prompt);
    const Score old_base = score(model, old_specs, base_cfg, per_prompt);

    const double kept = old_base.colour_share() > 0 ? old_adapted.colour_share() / old_base.colour_share() : 0;
    std::printf("%-34s n=%4d  shows cyan %5.1f%%   (base without adapters: %5.1f%%)\n", "new colour (cyan prompts)",
                new_adapted.n, 100 * new_adapted.colour_share(), 100 * new_base.colour_share());
    std::printf("%-34s n=%4d  colour %5.1f%%   (base: %5.1f%%, kept %.1f%%)\n", "old colours (quickstart prompts)",
                old_adapted.n, 100 * old_adapted.colour_share(), 100 * old_base.colour_share(), 100 * kept);
    const bool pass = new_adapted.colour_share() >= 0.70 && kept >= 0.90;
    std::printf("lora_quality: new colour %.1f%% (pass mark 70%%), old colours kept %.1f%% of the base's (pass mark 90%%) "
                "after %.0f s of LoRA training (%lld steps; base %s) -> %s\n",
                100 * new_adapted.colour_share(), 100 * kept, lora_secs, static_cast<long long>(lora_steps),
                base_secs > 0 ? (std::to_string(static_cast<int>(base_secs)) + " s here").c_str() : base_run.c_str(),
                pass ? "PASS" : "FAIL");
    std::printf("samples: %s/samples/\n", lora_run.c_str());
    return pass ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
