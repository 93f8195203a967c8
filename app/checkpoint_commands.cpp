// `zerostudio checkpoints` (list and verify a run's checkpoints), `zerostudio export` and
// `zerostudio tensorboard` (a run's TensorBoard event file from its events).
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "arg_parser.h"
#include "checkpoint/checkpoint.h"
#include "commands.h"
#include "core/error.h"
#include "train/checkpoint_export.h"
#include "train/tensorboard.h"

namespace zs::cli {

namespace {

const CommandSpec kTensorBoard{
    "tensorboard", "RUN_DIR [-o DIR]",
    "Write a run's TensorBoard event file from its events.jsonl and samples (finished or live runs,\n"
    "and runs made before logging.tensorboard or by another machine).",
    "Scalars train/loss, train/loss_smoothed, train/lr, train/grad_norm, train/samples_per_s,\n"
    "train/s_per_step, train/loss_scale, val/loss, val/loss_ema and memory/rank<R>/<kind>; each sample\n"
    "grid as the image `samples`; the resolved config as the text `config`. Then:\n"
    "  tensorboard --logdir DIR",
    {{"output", "DIR", "Folder of the event file (default: RUN_DIR/tensorboard)", false, "o"}},
    1, 1};

const CommandSpec kCheckpoints{
    "checkpoints", "RUN_DIR [--verify] [--json]",
    "List a run's checkpoints: step, time, loss, size, ZeRO stage and ranks.",
    "--verify checks that every file a checkpoint lists is there with its recorded size and CRC-32\n"
    "and names each bad file; the exit code is 1 when any checkpoint is damaged.",
    {{"verify", "", "Check sizes and checksums of every file"}, {"json", "", "One JSON object instead of the table"}},
    1, 1};

const CommandSpec kExport{
    "export",
    "CHECKPOINT --format diffusers|single-file|safetensors|lora-kohya|lora-diffusers|lora-diffsynth|lora-musubi|"
    "lora-aitoolkit [--merge] "
    "[--dtype fp16|bf16|fp32] [--ema] -o OUT",
    "Consolidate a sharded checkpoint for other tools.",
    "The shards are read one tensor at a time and written as they come, so memory stays near the\n"
    "largest tensor (plus the checkpoint's index), whatever the model's size or the number of\n"
    "ranks that saved it. No training world is started.\n"
    "  safetensors     OUT is a file: the UNet under diffusers' names, with __metadata__ (step,\n"
    "                  config hash, which weights).\n"
    "  diffusers       OUT is a new folder: unet/ (config.json, diffusion_pytorch_model.safetensors),\n"
    "                  text_encoder/, and the run's scheduler/ and tokenizer/.\n"
    "  single-file     OUT is a file in the original Stable Diffusion layout (model.diffusion_model.*,\n"
    "                  cond_stage_model.transformer.*), as A1111 and ComfyUI load it.\n"
    "  lora-kohya      OUT is a file: a LoRA checkpoint's adapters as kohya's sd-scripts write them\n"
    "                  (lora_unet_*/lora_te_*, .lora_down/.lora_up/.alpha, ss_* metadata), which\n"
    "                  A1111 and ComfyUI load. fp16 unless --dtype says otherwise.\n"
    "  lora-diffusers  OUT is a file: pytorch_lora_weights.safetensors as diffusers'\n"
    "                  load_lora_weights reads it (unet./text_encoder. lora_A/lora_B).\n"
    "A LoRA checkpoint holds adapters, not full weights: the first three formats need --merge,\n"
    "which writes the base model's weights with the adapters merged in (scale alpha/rank).\n"
    "Flux.1 runs: safetensors holds the transformer; diffusers is the run's pipeline folder with the\n"
    "trained transformer; lora-diffusers writes transformer./text_encoder. lora_A/lora_B with\n"
    "alpha/rank folded into lora_B (FluxPipeline.load_lora_weights reads it); single-file is the\n"
    "transformer in Black Forest Labs' layout (flux1-dev.safetensors' names, as ComfyUI loads it);\n"
    "lora-kohya uses sd-scripts' Flux names (lora_unet_double_blocks_0_img_attn_qkv, lora_te1_*),\n"
    "the adapters of fused layers joined into one of their summed rank.\n"
    "Qwen-Image runs: safetensors and diffusers as for Flux.1; the adapters as lora-diffusers\n"
    "(transformer. lora_A/lora_B, QwenImagePipeline.load_lora_weights), lora-diffsynth\n"
    "(DiffSynth-Studio's files: transformer_blocks.0.attn.to_q.lora_A.default.weight) or lora-musubi\n"
    "(musubi-tuner's lora_unet_transformer_blocks_0_attn_to_q.lora_down/lora_up/alpha).\n"
    "Z-Image runs: safetensors and diffusers as for Flux.1; single-file is the transformer in the\n"
    "original layout ComfyUI loads (z_image_turbo_bf16.safetensors' names, fused attention.qkv); the\n"
    "adapters as lora-diffusers (ZImagePipeline.load_lora_weights), lora-musubi (lora_unet_layers_0_\n"
    "attention_to_q.lora_down/lora_up/alpha) or lora-aitoolkit (diffusion_model.layers.0.attention.\n"
    "to_q.lora_A/lora_B).",
    {{"format", "FORMAT",
      "diffusers, single-file, safetensors, lora-kohya, lora-diffusers, lora-diffsynth, lora-musubi or lora-aitoolkit"},
     {"merge", "", "LoRA checkpoints: full weights with the adapters merged into the base"},
     {"dtype", "DTYPE", "fp16, bf16 or fp32 (default fp32, as stored; LoRA files fp16)"},
     {"ema", "", "Export the EMA weights"},
     {"output", "OUT", "Output file (safetensors, single-file, LoRA) or folder (diffusers)", false, "o"}},
    1, 1};

std::string local_time(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

const RegisterCommands kRegisterCheckpointCommands{{&kTensorBoard, &kCheckpoints, &kExport}};

}  // namespace

int run_checkpoints_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kCheckpoints, args);
  if (a.help) {
    std::cout << kCheckpoints.help();
    return 0;
  }
  const std::filesystem::path run(a.positional()[0]);
  const std::string root = (run / "checkpoints").string();
  if (!std::filesystem::is_directory(root))
    throw Error(ErrorKind::io, root + ": no checkpoints folder; pass a run directory (runs/<name>)");
  const auto all = checkpoint::list_checkpoints(root);
  const bool verify = a.has("verify");
  nlohmann::json out = {{"run_dir", run.string()}, {"checkpoints", nlohmann::json::array()}};
  bool damaged = false;
  for (const auto& c : all) {
    nlohmann::json row = {{"tag", c.tag},
                          {"path", c.path},
                          {"step", c.step},
                          {"time", c.meta.value("time", 0.0)},
                          {"loss", c.meta.value("loss", 0.0)},
                          {"bytes", c.bytes},
                          {"stage", c.meta.value("stage", 0)},
                          {"world_size", c.meta.value("world_size", 1)},
                          {"reason", c.meta.value("reason", "")}};
    if (verify) {
      const auto problems = checkpoint::verify_checkpoint(c);
      row["ok"] = problems.empty();
      row["problems"] = problems;
      damaged |= !problems.empty();
    }
    out["checkpoints"].push_back(row);
  }
  if (a.has("json")) {
    std::cout << out.dump(2) << "\n";
  } else {
    std::printf("%-14s %8s  %-19s  %9s  %10s  %5s  %5s  %s\n", "checkpoint", "step", "time", "loss", "size", "stage",
                "ranks", verify ? "verified" : "reason");
    for (const auto& r : out["checkpoints"]) {
      std::string last = r["reason"].get<std::string>();
      if (verify) last = r["ok"].get<bool>() ? "ok" : "DAMAGED";
      std::printf("%-14s %8lld  %-19s  %9.4f  %7.1f MB  %5d  %5d  %s\n", r["tag"].get<std::string>().c_str(),
                  static_cast<long long>(r["step"].get<std::int64_t>()), local_time(r["time"].get<double>()).c_str(),
                  r["loss"].get<double>(), static_cast<double>(r["bytes"].get<std::int64_t>()) / 1e6, r["stage"].get<int>(),
                  r["world_size"].get<int>(), last.c_str());
      if (verify)
        for (const auto& p : r["problems"]) std::printf("    %s\n", p.get<std::string>().c_str());
    }
    if (all.empty()) std::printf("(no complete checkpoint in %s)\n", root.c_str());
  }
  return damaged ? 1 : 0;
}

int run_export_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kExport, args);
  if (a.help) {
    std::cout << kExport.help();
    return 0;
  }
  if (!a.has("format")) throw UsageError("export needs --format diffusers|single-file|safetensors|lora-kohya|lora-diffusers");
  if (!a.has("output")) throw UsageError("export needs -o OUT (a file, or a new folder for diffusers)");
  checkpoint::ExportOptions o;
  o.format = a.get("format");
  const bool lora_file = o.format == "lora-kohya" || o.format == "lora-diffusers" || o.format == "lora-diffsynth" ||
                         o.format == "lora-musubi" || o.format == "lora-aitoolkit";
  if (o.format != "diffusers" && o.format != "safetensors" && o.format != "single-file" && !lora_file)
    throw UsageError("--format " + o.format + " is not one of diffusers, single-file, safetensors, lora-kohya, "
                     "lora-diffusers, lora-diffsynth, lora-musubi, lora-aitoolkit");
  o.merge = a.has("merge");
  if (o.merge && lora_file) throw UsageError("--merge writes full weights: use it with diffusers, single-file or safetensors");
  o.dtype = export_dtype(a.get("dtype", lora_file ? "fp16" : "fp32"));
  o.ema = a.has("ema");
  o.progress = export_progress("exporting");
  const auto r = train::export_checkpoint(a.positional()[0], a.get("output"), o);
  for (const auto& f : r.files) std::printf("wrote %s\n", f.c_str());
  for (const auto& n : r.notes) std::printf("note: %s\n", n.c_str());
  std::printf("%zu tensors, %.1f MB\n", r.tensors, static_cast<double>(r.bytes) / 1e6);
  return 0;
}

std::optional<c10::ScalarType> export_dtype(const std::string& dtype) {
  if (dtype == "fp16") return at::kHalf;
  if (dtype == "bf16") return at::kBFloat16;
  if (dtype == "fp32") return at::kFloat;
  throw UsageError("--dtype " + dtype + " is not one of fp16, bf16, fp32");
}

std::function<void(std::size_t, std::size_t)> export_progress(const std::string& verb) {
  return [verb, last_bucket = -1L](std::size_t done, std::size_t total) mutable {
    const long bucket = static_cast<long>(done * 10 / std::max<std::size_t>(total, 1));
    if (bucket != last_bucket || done == total) {
      last_bucket = bucket;
      std::fprintf(stderr, "%s: %zu/%zu tensors\n", verb.c_str(), done, total);
    }
  };
}

int run_tensorboard_command(const std::vector<std::string>& args) {
  const ParsedArgs a = parse_args(kTensorBoard, args);
  if (a.help) {
    std::cout << kTensorBoard.help();
    return 0;
  }
  const std::string run_dir = a.positional()[0];
  const auto out = train::write_tensorboard(run_dir, a.get("output", run_dir + "/tensorboard"));
  std::cout << "wrote " << out.path << ": " << out.written.scalars << " scalars, " << out.written.images << " images, "
            << out.written.texts << " texts\n";
  return 0;
}

}  // namespace zs::cli
