// bench_gpu_step: full-size UNet training steps on one CUDA GPU under ZeRO stages and offload:
// images/s and peak GPU memory per setting, against the same architecture in the machine's
// Python PyTorch (bench/gpu_baseline.py: a plain loop, bf16 autocast, fused AdamW, the same
// fused attention) measured in the same run. Each setting runs in a fresh process, so every
// peak is its own.
//
//   bench_gpu_step [--model sd15|sdxl] [--batch 8] [--res 64] [--steps 10] [--warmup 3]
//                  [--ckpt 0|1] [--runs stage0,stage2,...] [--python python3] [--baseline 1]
//                  [--profile 1]
//   bench_gpu_step --model flux-dev|flux-schnell|qwen-image --runs CONFIG.yaml,... [--steps 3]
//                  [--warmup 1] [--baseline 1] [--layers N] [--single-layers N]
//                  [--device cuda|cpu --scale full|tiny]
//
// UNet settings (--runs): stage0, stage1, stage2, stage3, stage2+cpu-opt, stage3+cpu-param,
// stage3+cpu-param+opt; "+delayed" adds zero.offload_optimizer.delayed_update (after one
// ordinary step: every timed step is delayed); a "/serial" suffix turns the side streams and the
// overlap of reductions and prefetches off (for measuring the overlap). --profile 1 also prints the
// forward, backward, reduction and step phases (synchronized, so without overlap).
//
// Transformer families: each run is a trainer config (the ready configs), trained as the trainer
// would with complete caches — the family's full-size transformer with random weights (built into
// shards with zero3_init_flag), the config's ZeRO stage, offload, optimizer, master weights, fused
// step, LoRA, checkpointing and attention — on random latents at data.resolution, batch
// training.batch_size, text states of model.max_sequence_length (512) tokens. The baseline is
// bench/gpu_transformer_baseline.py: the same diffusers architecture in a plain PyTorch loop
// (bf16 weights on the GPU, gradient checkpointing, the same fused attention; Adafactor or LoRA as
// the config says). Each line also gives the process's peak resident host memory.
// --device cpu --scale tiny runs a few-layer model on the CPU (a smoke test of this path).
// --layers/--single-layers build fewer blocks at full width (both sides): building full-size Flux
// with random weights took over 3.5 minutes on a 16-core GPU host (issue 39: LibTorch fills every
// weight with its serial CPU generator, then the units are cut to shards), so a lent GPU's minutes
// go further with a fifth of the blocks; the per-block time scales, the device peak of stage 3
// with offload does not depend on the block count.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include "python_baseline.h"
#include "source_dir.h"
#include "config/config_loader.h"
#include "core/memory.h"
#include "comm/communicator.h"
#include "models/attention_options.h"
#include "models/flux/flux_model.h"
#include "models/model_family.h"
#include "models/qwen_image/qwen_image_model.h"
#include "models/sd/unet_2d_condition.h"
#include "train/lora_setup.h"
#include "train/optimizer_setup.h"
#include "zero/sharded_init.h"
#include "zero/zero_optimizer.h"

using namespace zs;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Args {
  std::string model = "sd15", runs = "stage0,stage2,stage2+cpu-opt,stage3+cpu-param", python = "python3";
  std::string device = "cuda", scale = "full";
  int layers = -1, single_layers = -1;  ///< transformer families: block counts instead of the config's
  int batch = 8, res = 64, steps = 10, warmup = 3;
  bool ckpt = false, baseline = true, profile = false;
};

bool transformer_family(const std::string& model) {
  return model == "flux-dev" || model == "flux-schnell" || model == "qwen-image";
}

/// The process's peak resident memory (VmHWM), bytes.
long long host_peak() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long long kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
  std::fclose(f);
  return kb * 1024;
}

struct Setting {
  int stage = 0;
  zero::ZeroOptions::Offload opt = zero::ZeroOptions::Offload::none, param = zero::ZeroOptions::Offload::none;
  bool overlap = true;
  bool delayed = false;
};

Setting parse_setting(const std::string& name) {
  Setting s;
  std::string n = name;
  if (const auto slash = n.find("/serial"); slash != std::string::npos) {
    s.overlap = false;
    n.resize(slash);
  }
  if (n.rfind("stage", 0) != 0 || n.size() < 6) throw std::runtime_error("unknown setting " + name);
  s.stage = n[5] - '0';
  if (n.find("+cpu-opt") != std::string::npos || n.find("+opt") != std::string::npos) s.opt = zero::ZeroOptions::Offload::cpu;
  if (n.find("+cpu-param") != std::string::npos) s.param = zero::ZeroOptions::Offload::cpu;
  s.delayed = n.find("+delayed") != std::string::npos;
  return s;
}

void sync() { torch::cuda::synchronize(); }

/// One setting in this process: prints one "zs ..." line.
int child(const Args& a, const std::string& name) {
  keep_freed_memory();  // as the trainer does
  const Setting s = parse_setting(name);
  const at::Device dev(at::kCUDA, 0);
  const auto setup0 = Clock::now();
  at::manual_seed(0);
  const models::UNetConfig cfg = a.model == "sdxl" ? models::UNetConfig::sdxl() : models::UNetConfig::sd15();
  models::UNet2DConditionModel unet(cfg);
  auto comm = comm::Communicator::single();
  zero::ZeroOptions o;
  o.persistence_threshold = 0;  // every unit sharded at stage 3 (zero.stage3_param_persistence_threshold: 0)
  o.stage = s.stage;
  o.compute_dtype = at::kBFloat16;
  o.device = dev;
  o.offload_optimizer = s.opt;
  o.offload_param = s.param;
  o.side_streams = s.overlap;
  o.overlap_comm = s.overlap;
  if (!s.overlap) o.prefetch_bucket_size = 0;
  o.delayed_update = s.delayed;
  o.delayed_update_warmup = 1;
  zero::ZeroOptimizer opt(unet->units(), *comm, o);
  unet->set_unit_hooks(opt.unit_hooks());
  unet->set_gradient_checkpointing(a.ckpt);
  const auto bf16 = at::TensorOptions().dtype(at::kBFloat16).device(dev);
  const std::int64_t b = a.batch, ctx_len = 77;
  const at::Tensor x = at::randn({b, cfg.in_channels, a.res, a.res}, bf16), target = at::randn_like(x).to(at::kFloat);
  const at::Tensor t = at::randint(0, 1000, {b}, at::TensorOptions().dtype(at::kLong).device(dev));
  const at::Tensor ctx = at::randn({b, ctx_len, cfg.cross_attention_dim}, bf16);
  at::Tensor pooled, time_ids;
  if (cfg.addition_embed_type == "text_time") {
    pooled = at::randn({b, cfg.projection_class_embeddings_input_dim - 6 * cfg.addition_time_embed_dim}, bf16);
    const double px = 8.0 * a.res;  // original and target size in pixels, no crop
    time_ids = at::tensor({px, px, 0.0, 0.0, px, px}, at::kFloat).to(bf16).repeat({b, 1});
  }
  sync();
  const double setup_s = since(setup0);
  reset_gpu_peak(0);
  double total = 0, phase[4] = {0, 0, 0, 0};
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    const bool timed = step >= a.warmup;
    sync();
    const auto t0 = Clock::now();
    auto mark = [&](int i, Clock::time_point& from) {
      if (!a.profile) return;
      sync();
      if (timed) phase[i] += since(from);
      from = Clock::now();
    };
    auto p0 = t0;
    opt.zero_grad();
    const at::Tensor out = unet->forward(x, t, ctx, pooled, time_ids);
    const at::Tensor loss = (out.to(at::kFloat) - target).pow(2).mean();
    mark(0, p0);
    loss.backward();
    mark(1, p0);
    opt.reduce_gradients();
    mark(2, p0);
    opt.step(1e-5);
    mark(3, p0);
    sync();
    if (timed) total += since(t0);
  }
  const auto mem = gpu_memory(0);
  const double s_it = total / a.steps;
  std::printf("zs %s psi %lld s_it %.4f images_s %.3f peak_alloc %lld peak_reserved %lld setup_s %.1f host_peak %lld",
              name.c_str(), static_cast<long long>(opt.numel()), s_it, a.batch / s_it, static_cast<long long>(mem.peak),
              static_cast<long long>(mem.reserved), setup_s, host_peak());
  if (a.profile)
    std::printf(" forward %.4f backward %.4f reduce %.4f step %.4f", phase[0] / a.steps, phase[1] / a.steps,
                phase[2] / a.steps, phase[3] / a.steps);
  std::printf("\n");
  return 0;
}

/// One trainer config of a transformer family in this process (see the header): one "zs ..." line.
int child_transformer(const Args& a, const std::string& config_path) {
  keep_freed_memory();  // as the trainer does
  const bool cuda = a.device == "cuda", tiny = a.scale == "tiny";
  const at::Device dev = cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  const auto setup0 = Clock::now();
  config::TrainerConfig cfg = config::load_config_file(config_path).config;
  const models::TrainedParts trained = models::resolve_trained_parts(cfg);
  auto comm = comm::Communicator::single();
  const at::ScalarType compute = train::compute_dtype(cfg.precision, dev);
  // The trainer's zero3_init_flag: each unit is cut to its shard as soon as it is built.
  std::unique_ptr<zero::ShardedInit> sharded;
  models::UnitBuilt on_unit;
  if (cfg.zero.stage == 3 && cfg.zero.zero3_init_flag) {
    sharded = train::make_sharded_init(cfg, 1, 0);
    on_unit = sharded->callback();
  }
  std::unique_ptr<models::TrainableModel> model;
  std::int64_t in_channels = 0, context_dim = 0, pooled_dim = 0, context_len = 512;
  if (cfg.model.max_sequence_length) context_len = *cfg.model.max_sequence_length;
  if (a.model == "qwen-image") {
    models::QwenImageConfig c;  // Qwen/Qwen-Image's transformer/config.json
    if (tiny) {
      c.num_layers = 2;
      c.attention_head_dim = 16;
      c.num_attention_heads = 4;
      c.joint_attention_dim = 64;
      c.axes_dims_rope = {4, 6, 6};
    }
    if (a.layers >= 0) c.num_layers = a.layers;
    in_channels = c.in_channels;
    context_dim = c.joint_attention_dim;
    model = std::make_unique<models::QwenImageModel>(models::QwenImageModel::build_transformer_only(c, 0, on_unit));
  } else {
    models::FluxConfig c;  // FLUX.1-[dev]'s transformer/config.json ([schnell]: no guidance embedding)
    c.guidance_embeds = a.model == "flux-dev";
    if (tiny) {
      c.num_layers = 1;
      c.num_single_layers = 2;
      c.attention_head_dim = 16;
      c.num_attention_heads = 4;
      c.joint_attention_dim = 64;
      c.pooled_projection_dim = 32;
      c.axes_dims_rope = {4, 6, 6};
    }
    if (a.layers >= 0) c.num_layers = a.layers;
    if (a.single_layers >= 0) c.num_single_layers = a.single_layers;
    if (!cfg.model.max_sequence_length) context_len = c.guidance_embeds ? 512 : 256;
    in_channels = c.in_channels;
    context_dim = c.joint_attention_dim;
    pooled_dim = c.pooled_projection_dim;
    model = std::make_unique<models::FluxModel>(models::FluxModel::build_transformer_only(c, 0, on_unit));
  }
  if (tiny) context_len = std::min<std::int64_t>(context_len, 16);
  std::fprintf(stderr, "built in %.1f s\n", since(setup0));
  // As Trainer::State::build_model does after building.
  model->configure(cfg);
  model->set_text_training(trained.text);
  model->frozen_to(compute);
  model->to(dev, /*with_denoiser=*/false);
  if (trained.lora) train::attach_adapters(cfg, trained, *model);
  model->train(true);
  model->set_gradient_checkpointing(cfg.training.gradient_checkpointing, cfg.training.cpu_checkpointing);
  models::AttentionOptions attention;
  attention.mode = models::parse_attention_mode(cfg.training.attention);
  model->set_attention(attention);
  auto opt = train::make_optimizer(cfg, trained, *model, *comm, compute, dev, "bench",
                                   [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); },
                                   sharded.get());
  std::fprintf(stderr, "optimizer ready at %.1f s\n", since(setup0));
  // Random latents of data.resolution (8× VAE down-sampling, packed 2×2 inside predict), σ in
  // (0, 1), the rectified-flow target; text states as the cache would hold them.
  const std::int64_t b = cfg.training.batch_size, side = (tiny ? 64 : cfg.data.resolution) / 8;
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(dev);
  const at::Tensor x0 = at::randn({b, in_channels / 4, side, side}, f32), noise = at::randn_like(x0);
  const at::Tensor sigma = at::rand({b}, f32);
  const at::Tensor s4 = sigma.view({b, 1, 1, 1});
  const at::Tensor noisy = ((1 - s4) * x0 + s4 * noise).to(compute), target = noise - x0;
  models::TextConditioning cond;
  cond.context = at::randn({b, context_len, context_dim}, f32).to(compute);
  if (pooled_dim) cond.pooled = at::randn({b, pooled_dim}, f32).to(compute);
  const at::Tensor geometry = at::zeros({b, 6}, at::kFloat);
  const double lr = cfg.optimizer.lr, clip = cfg.training.gradient_clipping;
  if (cuda) sync();
  const double setup_s = since(setup0);
  if (cuda) reset_gpu_peak(0);
  double total = 0;
  for (int step = 0; step < a.warmup + a.steps; ++step) {
    const bool timed = step >= a.warmup;
    if (cuda) sync();
    const auto t0 = Clock::now();
    opt->zero_grad();
    opt->prepare_fused_step(lr, clip);
    const at::Tensor out = model->predict(noisy, sigma, cond, geometry);
    const at::Tensor loss = (out.to(at::kFloat) - target).pow(2).mean();
    loss.backward();
    opt->reduce_gradients();
    opt->clip_grad_norm(clip);
    opt->step(lr);
    if (cuda) sync();
    if (timed) total += since(t0);
    std::fprintf(stderr, "step %d: loss %.5f, %.2f s\n", step + 1, loss.item<double>(), since(t0));
  }
  const auto mem = cuda ? gpu_memory(0) : GpuMemory{};
  const double s_it = total / a.steps;
  std::printf("zs %s psi %lld s_it %.4f images_s %.4f peak_alloc %lld peak_reserved %lld setup_s %.1f host_peak %lld\n",
              config_path.c_str(), static_cast<long long>(opt->numel() + opt->frozen_numel()), s_it, b / s_it,
              static_cast<long long>(mem.peak), static_cast<long long>(mem.reserved), setup_s, host_peak());
  return 0;
}

double field(const std::string& line, const std::string& key) {
  const auto at = line.find(" " + key + " ");
  return at == std::string::npos ? -1 : std::atof(line.c_str() + at + key.size() + 2);
}

std::string common_flags(const Args& a) {
  std::ostringstream f;
  f << " --model " << a.model << " --batch " << a.batch << " --res " << a.res << " --steps " << a.steps << " --warmup "
    << a.warmup << " --ckpt " << a.ckpt;
  return f.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line as it comes, also into a pipe that may be cut
  Args a;
  std::string child_run;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") a.model = v;
    else if (k == "--runs") a.runs = v;
    else if (k == "--python") a.python = v;
    else if (k == "--batch") a.batch = std::stoi(v);
    else if (k == "--res") a.res = std::stoi(v);
    else if (k == "--steps") a.steps = std::stoi(v);
    else if (k == "--warmup") a.warmup = std::stoi(v);
    else if (k == "--ckpt") a.ckpt = v == "1";
    else if (k == "--baseline") a.baseline = v == "1";
    else if (k == "--profile") a.profile = v == "1";
    else if (k == "--device") a.device = v;
    else if (k == "--scale") a.scale = v;
    else if (k == "--layers") a.layers = std::stoi(v);
    else if (k == "--single-layers") a.single_layers = std::stoi(v);
    else if (k == "--child") child_run = v;
    else {
      std::fprintf(stderr, "bench_gpu_step: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = '\0';
  const bool transformer = transformer_family(a.model);
  if (a.device == "cuda" && !torch::cuda::is_available()) {
    std::printf("bench_gpu_step: skipped, no CUDA device here (it measures one GPU)\n");
    return 0;
  }
  if (!child_run.empty()) {
    try {
      return transformer ? child_transformer(a, child_run) : child(a, child_run);
    } catch (const std::exception& e) {
      std::printf("failed: %s\n", e.what());
      return 1;
    }
  }
  if (transformer) {
    // Transformer families: one child per config, then the baseline per config's method.
    if (a.runs.find("stage") == 0) a.runs = "";
    std::printf("%s transformer (%s), %d timed steps after %d, on %s\n", a.model.c_str(), a.scale.c_str(), a.steps,
                a.warmup, a.device.c_str());
    std::printf("%-44s %9s %9s %13s %9s %10s %9s\n", "run", "s/it", "vs PyTorch", "peak alloc MiB", "reserved",
                "host MiB", "setup s");
    std::stringstream list(a.runs);
    for (std::string file; std::getline(list, file, ',');) {
      std::ostringstream f;
      f << " --model " << a.model << " --steps " << a.steps << " --warmup " << a.warmup << " --device " << a.device
        << " --scale " << a.scale << " --layers " << a.layers << " --single-layers " << a.single_layers;
      const std::string out = run_command(std::string(self) + f.str() + " --child " + file + " 2>&1");
      const double s_it = field(out, "s_it");
      if (s_it <= 0) {
        std::printf("%-44s failed:\n%s\n", file.c_str(), out.c_str());
        std::fflush(stdout);
        continue;
      }
      double base = -1;
      std::string base_out;
      if (a.baseline && a.device == "cuda") {
        const std::string script = std::string(zs_bench_source_dir()) + "/bench/gpu_transformer_baseline.py";
        base_out = run_command(a.python + " " + script + " --model " + a.model + " --config " + file + " --steps " +
                               std::to_string(a.steps) + " --warmup " + std::to_string(a.warmup) + " --layers " +
                               std::to_string(a.layers) + " --single-layers " + std::to_string(a.single_layers) + " 2>&1");
        base = field(base_out, "s_it");
      }
      char ratio[32] = "";
      if (base > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", base / s_it);
      std::printf("%-44s %9.3f %9s %13.0f %9.0f %10.0f %9.1f\n", file.c_str(), s_it, ratio, field(out, "peak_alloc") / 1048576,
                  field(out, "peak_reserved") / 1048576, field(out, "host_peak") / 1048576, field(out, "setup_s"));
      if (base > 0)
        std::printf("%-44s %9.3f %9s %13.0f %9.0f %10.0f\n", "  PyTorch + diffusers, same method", base, "1.00",
                    field(base_out, "peak_alloc") / 1048576, field(base_out, "peak_reserved") / 1048576,
                    field(base_out, "host_peak") / 1048576);
      else if (a.baseline && a.device == "cuda")
        std::printf("  PyTorch baseline failed:\n%s\n", base_out.c_str());
      std::fflush(stdout);
    }
    std::printf("vs PyTorch: the baseline's s/it over ours (above 1: faster). Peak: the caching allocator's peak of\n"
                "allocated bytes during the timed steps; host: the process's peak resident memory.\n");
    return 0;
  }

  std::printf("%s UNet, batch %d, %d×%d latents, bf16%s, %d timed steps after %d\n", a.model.c_str(), a.batch, a.res,
              a.res, a.ckpt ? ", gradient checkpointing" : "", a.steps, a.warmup);
  std::printf("%-26s %9s %9s %11s %13s %9s %9s\n", "run", "s/it", "images/s", "vs PyTorch", "peak alloc MiB",
              "reserved", "setup s");
  double base_ips = -1;
  if (a.baseline) {
    const std::string script = std::string(zs_bench_source_dir()) + "/bench/gpu_baseline.py";
    const std::string out = run_command(a.python + " " + script + common_flags(a) + " 2>&1");
    base_ips = field(out, "images_s");
    if (base_ips <= 0) std::printf("PyTorch baseline failed:\n%s\n", out.c_str());
    else
      std::printf("%-26s %9.3f %9.2f %11s %13.0f %9.0f %9s\n", "PyTorch (bf16 autocast)", field(out, "s_it"), base_ips,
                  "1.00", field(out, "peak_alloc") / 1048576, field(out, "peak_reserved") / 1048576, "");
    std::fflush(stdout);
  }
  std::stringstream list(a.runs);
  for (std::string name; std::getline(list, name, ',');) {
    const std::string out = run_command(std::string(self) + common_flags(a) + " --profile " + (a.profile ? "1" : "0") +
                                        " --child " + name + " 2>&1");
    const double ips = field(out, "images_s");
    if (ips <= 0) {
      std::printf("%-26s failed:\n%s\n", name.c_str(), out.c_str());
      continue;
    }
    char ratio[32] = "";
    if (base_ips > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", ips / base_ips);
    std::printf("%-26s %9.3f %9.2f %11s %13.0f %9.0f %9.1f\n", name.c_str(), field(out, "s_it"), ips, ratio,
                field(out, "peak_alloc") / 1048576, field(out, "peak_reserved") / 1048576, field(out, "setup_s"));
    if (a.profile)
      std::printf("%-26s forward %.3f s, backward %.3f s, reduce %.3f s, step %.3f s\n", "", field(out, "forward"),
                  field(out, "backward"), field(out, "reduce"), field(out, "step"));
    std::fflush(stdout);
  }
  std::printf("vs PyTorch: images/s over the baseline's (above 1: faster). Peak: the caching allocator's peak of\n"
              "allocated bytes during the timed steps; reserved: what it holds from the GPU at the end.\n");
  return 0;
}
