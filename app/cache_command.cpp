// `zerostudio cache`: fills the latent and text-embedding caches for a config's dataset before
// training, so the run keeps the frozen VAE and text encoders off its device.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <torch/cuda.h>

#include "arg_parser.h"
#include "commands.h"
#include "config/config_loader.h"
#include "config/trainability.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/latent_cache.h"
#include "models/attention_options.h"
#include "models/model_family.h"
#include "models/trainable_model.h"
#include "train/frozen_cache.h"
#include "train/optimizer_setup.h"
#include "train/run_directory.h"

extern char** environ;

namespace zs::cli {
namespace {

const CommandSpec kCache{
    "cache", "FILE [--num_processes N] [--run-dir DIR] [--set KEY=VALUE ...]",
    "Fill the latent and text-embedding caches (data.cache_latents, data.cache_text_embeddings)\n"
    "for a config's dataset: every image, flipped too when data.flip_p > 0, and every caption.",
    "Resumable: what the caches hold is skipped, so an interrupted pass goes on where it stopped.\n"
    "--num_processes N splits the items over N processes (one GPU each where there are GPUs).\n"
    "A run whose caches hold everything trains without the VAE and text encoders on its device.\n"
    "An empty data.path means the run's data/ folder: give --run-dir or logging.run_name.",
    {{"num_processes", "N", "Processes sharing the work (default 1)"},
     {"run_dir", "DIR", "The run directory whose data/ folder holds the dataset (when data.path is empty)"},
     {"rank", "R", "Internal: this process's share of --num_processes (the first starts the others)"},
     {"set", "KEY=VALUE", "Override one key, validated by the schema (repeatable)", true}},
    1, 1};

/// Starts `zerostudio cache` again as process `rank` of `world`; returns its pid.
pid_t spawn_share(const std::vector<std::string>& args, int rank, int world) {
  std::vector<std::string> argv_s = {"/proc/self/exe", "cache"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  argv_s.insert(argv_s.end(), {"--rank", std::to_string(rank), "--num_processes", std::to_string(world)});
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0)
    throw Error(ErrorKind::io, "could not start cache process " + std::to_string(rank));
  return pid;
}

const RegisterCommands kRegisterCacheCommand{{&kCache}};

}  // namespace

int run_cache_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kCache, args);
  if (a.help) {
    std::cout << kCache.help();
    return 0;
  }
  const int world = static_cast<int>(a.get_int("num_processes", 1, 1));
  const int rank = static_cast<int>(a.get_int("rank", 0, 0));
  if (rank >= world) throw UsageError("--rank must be below --num_processes");
  const std::string file = a.positional()[0];
  const config::LoadedConfig loaded = config::load_config_file(file, a.all("set"));
  if (rank == 0) print_warnings(loaded.warnings);
  const config::TrainerConfig& cfg = loaded.config;
  if (cfg.model.path.empty())
    throw Error(ErrorKind::config, file + ": model.path is empty; the caches hold what a pipeline's frozen VAE and text "
                                          "encoders compute, and the tiny preset has none");
  if (!cfg.data.cache_latents && !cfg.data.cache_text_embeddings)
    throw Error(ErrorKind::config, file + ": data.cache_latents and data.cache_text_embeddings are both off; turn them "
                                          "on (--set data.cache_latents=true --set data.cache_text_embeddings=true)");
  // The model's files as `train` reads them, before anything is created (issue 59 item 11).
  config::require_readable_model(loaded);
  const train::RunDirectory run = train::resolve_run_dir(cfg, {a.get("run_dir"), "", std::filesystem::path(file).stem().string()});
  if (cfg.data.path.empty() && run.generated)
    throw Error(ErrorKind::config, file + ": data.path is empty, which means the run's data/ folder; name the run with "
                                          "--run-dir DIR or logging.run_name");
  const std::string data_path = config::dataset_folder(cfg, run.path);

  // The others first, so they work while this one loads.
  std::vector<pid_t> children;
  if (rank == 0)
    for (int r = 1; r < world; ++r) {
      std::vector<std::string> forwarded = {file};
      for (const auto& s : a.all("set")) forwarded.insert(forwarded.end(), {"--set", s});
      if (a.has("run_dir")) forwarded.insert(forwarded.end(), {"--run-dir", run.path});
      children.push_back(spawn_share(forwarded, r, world));
    }

  at::Device device = at::kCPU;
  if (!cfg.launch.use_cpu && torch::cuda::is_available())
    device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rank % torch::cuda::device_count()));
  // As the trainer computes: the same dtype and attention path, so cached values are the ones
  // training would encode.
  const std::unique_ptr<models::TrainableModel> frozen = models::family_of(cfg).load_frozen(cfg);
  models::TrainableModel& model = *frozen;
  if (const std::string said = train::quantize_text_encoders(cfg, model); !said.empty() && rank == 0) std::cerr << said << "\n";
  model.frozen_to(train::compute_dtype(cfg.precision, device));
  model.to(device, /*with_denoiser=*/false);
  train::place_quantized_weights(model, device);
  model.train(false);
  models::AttentionOptions attention;
  attention.mode = models::parse_attention_mode(cfg.training.attention);
  model.set_attention(attention);
  train::Caches caches = train::open_caches(cfg, model);

  data::LoaderOptions lo = train::loader_options(cfg);
  lo.batch_size = 1;  // the loader only lists items here; it never starts
  lo.num_workers = 0;
  lo.content_keys = true;
  data::DataLoader loader(
      data::scan_dataset(data_path, train::metadata_options(cfg.data, [rank](const std::string& w) {
                           if (rank == 0) std::cerr << "warning: " << w << "\n";
                         })),
      lo);
  // Only this process's share of the image files is read here.
  const train::CacheNeeds share = train::cache_needs(loader, caches.latents != nullptr, rank, world, train::sampling_captions(cfg),
                                                        train::sampling_prompts(cfg));
  const bool tty = isatty(STDERR_FILENO) != 0;
  const auto start = std::chrono::steady_clock::now();
  int last = -1;
  const std::string who = world > 1 ? "[process " + std::to_string(rank) + "] " : "";
  const std::int64_t stored = train::fill_caches(
      model, loader, share, caches.latents.get(), caches.texts.get(), device,
      [&](std::int64_t done, std::int64_t total) {
        const int pct = total ? static_cast<int>(100 * done / total) : 100;
        if (!tty && pct / 5 == last / 5 && done != total) return;
        last = pct;
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const int filled = pct * 30 / 100;
        std::fprintf(stderr, "%s%s[%s%s] %lld/%lld encoded  %.1f s%s", tty ? "\r" : "", who.c_str(),
                     std::string(static_cast<std::size_t>(filled), '#').c_str(),
                     std::string(static_cast<std::size_t>(30 - filled), '.').c_str(), static_cast<long long>(done),
                     static_cast<long long>(total), secs, tty ? "\033[K" : "\n");
        std::fflush(stderr);
      });
  if (tty) std::fprintf(stderr, "\n");

  int failed = 0;
  for (std::size_t i = 0; i < children.size(); ++i) {
    int status = 0;
    waitpid(children[i], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failed;
      std::cerr << "cache process " << i + 1 << " failed ("
                << (WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) : "exit " + std::to_string(WEXITSTATUS(status)))
                << "); run the command again to finish its share\n";
    }
  }
  if (rank != 0) return 0;
  // The whole dataset for the summary (the first process's own files are not read again).
  const train::CacheNeeds needs = world > 1 ? train::cache_needs(loader, caches.latents != nullptr, 0, 1, train::sampling_captions(cfg),
                                                                     train::sampling_prompts(cfg))
                                                  : share;
  const train::CacheMissing missing = train::cache_missing(needs, caches.latents.get(), caches.texts.get());
  std::cout << "caches for " << data_path << ": " << needs.images.size() - static_cast<std::size_t>(missing.images) << "/"
            << needs.images.size() << " latents" << (caches.latents ? " in " + caches.latents->dir() : " (off)") << ", "
            << needs.captions.size() - static_cast<std::size_t>(missing.captions) << "/" << needs.captions.size()
            << " captions" << (caches.texts ? " in " + caches.texts->dir() : " (off)") << "; this process encoded "
            << stored << "\n";
  if (!needs.finite)
    std::cout << "note: data.metadata.shuffle_tag_p shuffles tags, so training still encodes captions (the text "
                 "encoders stay on the device)\n";
  else if (missing.total() == 0 && caches.latents && caches.texts)
    std::cout << "complete: training keeps the VAE and text encoders off the device\n";
  return failed ? 1 : 0;
}

}  // namespace zs::cli
