#include "config/setup_questions.h"

#include "config/trainability.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

#include "config/config_import.h"
#include "config/config_writer.h"
#include "config/family_defaults.h"
#include "config/schema.h"
#include "core/error.h"
#include "models/model_family.h"
#include "settings/trainer_config.h"

namespace zs::config {
namespace {

using Kind = SetupQuestion::Kind;

std::string get(const SetupAnswers& a, const std::string& id) {
  const auto it = a.find(id);
  return it == a.end() ? std::string() : it->second;
}
long as_int(const SetupAnswers& a, const std::string& id) {
  try {
    return std::stol(get(a, id));
  } catch (const std::exception&) {
    return 0;
  }
}

bool distributed(const SetupAnswers& a) { return get(a, "machine_type") != "no"; }
bool several_machines(const SetupAnswers& a) { return distributed(a) && as_int(a, "num_machines") > 1; }
bool single_process(const SetupAnswers& a) { return !distributed(a); }
bool deepspeed(const SetupAnswers& a) { return get(a, "use_deepspeed") == "yes"; }
bool zero_questions(const SetupAnswers& a) { return deepspeed(a) && get(a, "deepspeed_config_file").empty(); }
bool offload_optimizer(const SetupAnswers& a) { return zero_questions(a) && as_int(a, "zero_stage") >= 1; }
bool optimizer_nvme(const SetupAnswers& a) { return offload_optimizer(a) && get(a, "offload_optimizer") == "nvme"; }
bool stage3(const SetupAnswers& a) { return zero_questions(a) && as_int(a, "zero_stage") == 3; }
bool param_nvme(const SetupAnswers& a) { return stage3(a) && get(a, "offload_param") == "nvme"; }
bool model_folder(const SetupAnswers& a) { return get(a, "model_source") == "folder"; }
bool model_file(const SetupAnswers& a) { return get(a, "model_source") == "file"; }
bool data_folder(const SetupAnswers& a) { return get(a, "data_source") == "folder"; }
bool warmup(const SetupAnswers& a) { return get(a, "lr_scheduler") != "constant"; }
bool sampling(const SetupAnswers& a) { return as_int(a, "sampling_every") > 0; }
bool lora(const SetupAnswers& a) { return get(a, "training_method") == "lora"; }
bool bf16(const SetupAnswers& a) { return get(a, "mixed_precision") == "bf16"; }

bool not_fp16(const SetupAnswers& a) { return get(a, "mixed_precision") != "fp16"; }
/// zero.offload_optimizer.delayed_update's conditions: the optimizer in CPU memory, AdamW or
/// AdamW8bit with fp32 masters, not fused.
bool delayed_applies(const SetupAnswers& a) {
  return offload_optimizer(a) && get(a, "offload_optimizer") == "cpu" && get(a, "optimizer_type") != "Adafactor" &&
         !(not_fp16(a) && get(a, "fused_backward") == "yes") && !(bf16(a) && get(a, "master_weights") == "none");
}
/// The answered model as a config (preset, or the folder or file).
TrainerConfig model_of(const SetupAnswers& a) {
  TrainerConfig c;
  if (model_folder(a)) c.model.path = get(a, "model_path");
  else if (model_file(a)) c.model.path = get(a, "model_file");
  else c.model.preset = get(a, "model_source");
  return c;
}
/// Whether the model's family has a prediction type to choose (rectified flow has none).
bool prediction_applies(const SetupAnswers& a) {
  try {
    const auto keys = models::family_of(model_of(a)).keys_not_applying();
    return std::find(keys.begin(), keys.end(), "model.prediction_type") == keys.end();
  } catch (const Error&) {
    return true;  // no model named yet
  }
}
/// Rectified-flow families (Flux.1, Qwen-Image): timestep sampling instead of a prediction type.
bool flow_matching(const SetupAnswers& a) { return !prediction_applies(a); }
bool text_trained(const SetupAnswers& a) {
  // The model and the choice as a config, resolved where the trainer resolves it.
  TrainerConfig c = model_of(a);
  c.training.train_text_encoder = get(a, "train_text_encoder");
  try {
    return models::resolve_trained_parts(c).text_trained();
  } catch (const Error&) {
    return false;  // no model named yet
  }
}

bool text_frozen(const SetupAnswers& a) { return !text_trained(a); }

/// The families the model page starts with (family_defaults.h).
std::vector<std::pair<std::string, std::string>> family_choices() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : setup_families()) out.emplace_back(f.id, f.title);
  return out;
}

/// Every registered family's presets, then a folder or a single file on disk (question_choices
/// keeps those of the answered family).
std::vector<std::pair<std::string, std::string>> model_choices() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const models::ModelFamily* f : models::model_families())
    for (const auto& p : f->presets()) out.emplace_back(p.name, p.title);
  out.emplace_back("folder", "A diffusers folder on disk");
  out.emplace_back("file", "A single-file checkpoint (.safetensors, as A1111 and ComfyUI use)");
  return out;
}

const std::vector<std::pair<std::string, std::string>> kOffload = {
    {"none", "none"}, {"cpu", "cpu"}, {"nvme", "nvme"}};

std::vector<SetupQuestion> make_questions() {
  return {
      {"compute_environment", "environment", "In which compute environment are you running?", Kind::choice,
       {{"this_machine", "This machine"}},
       "Training runs on this machine or on machines you start yourself (AWS SageMaker is not supported).", {}},
      {"machine_type", "environment", "Which type of machine are you using?", Kind::choice,
       {{"no", "No distributed training"}, {"multi_cpu", "multi-CPU"}, {"multi_gpu", "multi-GPU"}},
       "One process, or several ranks on CPUs (Gloo) or GPUs (NCCL).", {"launch.use_cpu"}},
      {"num_machines", "environment", "How many different machines will you use (use more than 1 for multi-node training)?",
       Kind::integer, {}, "", {"launch.num_machines"}, distributed},
      {"machine_rank", "environment", "What is the rank of this machine?", Kind::integer, {}, "0 for the main machine.",
       {"launch.machine_rank"}, several_machines},
      {"main_process_ip", "environment", "What is the IP address of the machine that will host the main process?",
       Kind::text, {}, "", {"launch.main_process_ip"}, several_machines},
      {"main_process_port", "environment", "What is the port you will use to communicate with the main process?",
       Kind::integer, {}, "", {"launch.main_process_port"}, several_machines},
      {"use_cpu", "environment", "Do you want to run your training on CPU only (even if a GPU / Apple Silicon device is available)?",
       Kind::yes_no, {}, "", {"launch.use_cpu"}, single_process},
      {"use_deepspeed", "deepspeed", "Do you want to use DeepSpeed?", Kind::yes_no, {},
       "ZeroStudio's own ZeRO engine: shards optimizer states, gradients and parameters over the ranks, "
       "and offloads them to CPU memory or NVMe.",
       {"zero.stage"}},
      {"deepspeed_config_file", "deepspeed", "Do you want to specify a json file to a DeepSpeed config? (path, or empty)",
       Kind::file, {}, "An existing DeepSpeed JSON is imported; its settings replace the ZeRO questions below.",
       {"deepspeed_config_file"}, deepspeed},
      {"zero_stage", "deepspeed", "What should be your DeepSpeed's ZeRO optimization stage?", Kind::choice,
       {{"0", "0"}, {"1", "1"}, {"2", "2"}, {"3", "3"}},
       "0: replicate everything; 1: shard optimizer states; 2: also gradients; 3: also parameters. "
       "Pick the lowest stage that fits (the memory panel suggests it).",
       {"zero.stage"}, zero_questions},
      {"offload_optimizer", "deepspeed", "Where to offload optimizer states?", Kind::choice, kOffload,
       "cpu: the optimizer step runs on the CPU (fused AdamW); nvme: its states live in files on a fast disk.",
       {"zero.offload_optimizer.device"}, offload_optimizer},
      {"offload_optimizer_nvme_path", "deepspeed", "Nvme Path to offload optimizer states?", Kind::folder, {},
       "A folder on a fast local disk with room for 12 bytes per parameter / processes.",
       {"zero.offload_optimizer.nvme_path"}, optimizer_nvme},
      {"offload_param", "deepspeed", "Where to offload parameters?", Kind::choice, kOffload,
       "Asked for stage 3 only: parameters are sharded only there. accelerate also asks it for stage 2, "
       "where DeepSpeed ignores the answer.",
       {"zero.offload_param.device"}, stage3},
      {"offload_param_nvme_path", "deepspeed", "Nvme Path to offload parameters?", Kind::folder, {}, "",
       {"zero.offload_param.nvme_path"}, param_nvme},
      {"gradient_accumulation_steps", "deepspeed", "How many gradient accumulation steps you're passing in your script?",
       Kind::integer, {}, "", {"training.gradient_accumulation_steps"}, zero_questions},
      {"gradient_clipping", "deepspeed", "What is the gradient clipping value? (0 turns clipping off)", Kind::number,
       {}, "", {"training.gradient_clipping"}, zero_questions},
      {"zero3_save_16bit_model", "deepspeed", "Do you want to save 16-bit model weights when using ZeRO Stage-3?",
       Kind::yes_no, {}, "", {"zero.stage3_gather_16bit_weights_on_model_save"}, stage3},
      {"zero3_init_flag", "deepspeed",
       "Do you want to enable `deepspeed.zero.Init` when using ZeRO Stage-3 for constructing massive models?",
       Kind::yes_no, {}, "", {"zero.zero3_init_flag"}, stage3},
      {"num_processes", "processes", "How many processes should be used for distributed training?", Kind::integer, {},
       "In all, over every machine (one per GPU).", {"launch.num_processes", "training.train_batch_size"}, distributed},
      {"mixed_precision", "processes", "Do you wish to use mixed precision?", Kind::choice,
       {{"no", "no"}, {"fp16", "fp16"}, {"bf16", "bf16"}},
       "bf16 on recent GPUs and on the CPU; fp16 needs CUDA and uses dynamic loss scaling.", {"precision"}},
      {"model_family", "model", "Which model family do you want to train?", Kind::choice, family_choices(),
       "Fills the family's defaults, as the ready configs in configs/ set them: the resolution, the objective "
       "(prediction type, or timestep sampling for rectified flow), LoRA's target layers, batch size, "
       "learning rate and schedule and, for a full-size model, a GPU run in bf16. The sources below are the "
       "family's.",
       {}},
      {"model_source", "model", "Which model do you want to train?", Kind::choice,
       model_choices(),
       "", {"model.preset", "model.path"}},
      {"model_path", "model", "Model folder (diffusers layout, with model_index.json)", Kind::folder, {}, "",
       {"model.path"}, model_folder},
      {"model_file", "model", "Single-file checkpoint (.safetensors)", Kind::file, {},
       "The model in its original release's layout: Stable Diffusion 1.x or SDXL, or the transformer of "
       "Flux.1, FLUX.2 or Z-Image.", {"model.path"}, model_file},
      {"model_config_path", "model", "Its tokenizer folder", Kind::folder, {},
       "Single files carry no vocabulary: a diffusers folder of the same family (its tokenizer/ is used, and its "
       "configs where present; for the transformer families its text encoder, VAE and scheduler too), or for SD "
       "a folder with CLIP's vocab.json and merges.txt.",
       {"model.config_path"}, model_file},
      {"prediction_type", "model", "Prediction type", Kind::choice, {{"epsilon", "epsilon"}, {"v_prediction", "v_prediction"}},
       "What the UNet predicts: the added noise, or the velocity (not asked for flow-matching models).",
       {"model.prediction_type"}, prediction_applies},
      {"timestep_sampling", "model", "Timestep sampling", Kind::choice,
       {{"shift", "shift: sigmoid of a normal draw, shifted for the image size as sampling shifts (sd-scripts)"},
        {"sigmoid", "sigmoid: sigmoid of a normal draw (ai-toolkit, SimpleTuner)"},
        {"logit_normal", "logit-normal (SD3's paper)"},
        {"uniform", "uniform"}},
       "How training draws the noise level of rectified flow (asked for Flux.1 and Qwen-Image; DDPM models draw "
       "their timesteps uniformly).",
       {"training.timestep_sampling"}, flow_matching},
      {"data_source", "dataset", "Where are the training images?", Kind::choice,
       {{"shapes", "Generate the demo dataset of coloured shapes"}, {"folder", "A folder of images with captions"}},
       "", {"data.generate", "data.path"}},
      {"data_path", "dataset", "Dataset folder", Kind::folder, {},
       "images/ + captions/, image + .txt side by side, metadata.csv, or a metadata/ JSON tree.", {"data.path"},
       data_folder},
      {"resolution", "dataset", "Training resolution (pixels)", Kind::integer, {}, "", {"data.resolution"}},
      {"batch_size", "training", "Batch size per process", Kind::integer, {}, "", {"training.batch_size"}},
      {"epochs", "training", "Epochs (empty: train by steps)", Kind::text, {},
       "kohya's max_train_epochs, DiffSynth-Studio's --num_epochs: the steps then follow from the dataset "
       "(`zerostudio config validate` prints them).",
       {"training.epochs"}},
      {"max_steps", "training", "Training steps (when no epochs)", Kind::integer, {}, "", {"training.max_steps"}},
      {"repeats", "training", "Repeats of each image per epoch", Kind::integer, {},
       "kohya's num_repeats, DiffSynth-Studio's --dataset_repeat.", {"data.repeats"}},
      {"learning_rate", "training", "Learning rate", Kind::number, {}, "", {"optimizer.lr"}},
      {"optimizer_type", "training", "Optimizer", Kind::choice,
       {{"AdamW", "AdamW (fp32 moments: 8 bytes a parameter)"},
        {"AdamW8bit", "8-bit AdamW (bitsandbytes' block-wise moments: ~2 bytes a parameter)"},
        {"Adafactor", "Adafactor (factored second moment: a small fraction of a byte a parameter)"}},
       "Every optimizer is sharded and offloaded by the ZeRO settings. Full fine-tunes of large models "
       "usually take Adafactor (kohya, OneTrainer), LoRA runs 8-bit AdamW (ai-toolkit).",
       {"optimizer.type"}},
      {"master_weights", "training", "Keep fp32 master weights?", Kind::choice,
       {{"fp32", "Yes (mixed precision as DeepSpeed: 4 bytes a parameter more)"},
        {"none", "No: bf16 weights only, updates rounded stochastically"}},
       "Only with bf16: the bf16 weights are updated in float32 and rounded up or down at random in "
       "proportion, so small updates are not lost (OneTrainer's stochastic rounding).",
       {"optimizer.master_weights"}, bf16},
      {"fused_backward", "training", "Step each block during backward (fused backward)?", Kind::yes_no, {},
       "Each ZeRO unit steps as soon as its gradients are reduced and, from stage 2 on, its gradient memory "
       "goes at once: no full set of gradients ever exists. Clipping then uses the previous step's norm.",
       {"optimizer.fused_backward"}, not_fp16},
      {"delayed_update", "training", "Hide the CPU optimizer step behind the next step (delayed update)?", Kind::yes_no, {},
       "ZeRO-Offload's one-step delayed parameter update: the CPU computes each update while the GPU runs the "
       "next step, and the update lands one step late. For long runs whose CPU step is slow; after "
       "zero.offload_optimizer.delayed_update_warmup ordinary steps.",
       {"zero.offload_optimizer.delayed_update"}, delayed_applies},
      {"lr_scheduler", "training", "Learning-rate schedule", Kind::choice,
       {{"constant", "constant"}, {"cosine", "cosine"}, {"WarmupLR", "WarmupLR"}, {"WarmupDecayLR", "WarmupDecayLR"}},
       "", {"scheduler"}},
      {"warmup_steps", "training", "Warmup steps", Kind::integer, {}, "", {"scheduler.warmup_steps"}, warmup},
      {"training_method", "method", "What do you want to train?", Kind::choice,
       {{"full", "The whole UNet (full fine-tuning)"}, {"lora", "LoRA adapters on a frozen UNet"}},
       "LoRA trains small low-rank adapters (a few MB) and fits much smaller cards; the frozen base is still "
       "sharded by ZeRO stage 3 like trained weights.",
       {"training.method"}},
      {"lora_rank", "method", "LoRA rank", Kind::integer, {},
       "Rank of every adapter (kohya's network_dim): 4-32 is usual; memory and file size grow with it.",
       {"lora.rank"}, lora},
      {"lora_alpha", "method", "LoRA alpha (empty: the rank, scale 1)", Kind::text, {},
       "The adapters' scale is alpha / rank; kohya's sd-scripts default to 1.", {"lora.alpha"}, lora},
      {"lora_targets", "method", "Layers that get adapters (one per line; empty: the model's default)", Kind::lines, {},
       "By the last parts of their names: to_q, to_k, to_v, to_out.0 (attention, SD's default); ff.net.0.proj, "
       "ff.net.2 (feed-forward); proj_in, proj_out; conv1, conv2 (SD's resnets: LoCon). Empty: the model "
       "family's default (lora.targets: null).",
       {"lora.targets"}, lora},
      {"base_precision", "method", "Keep the frozen base in fewer bits?", Kind::choice,
       {{"bf16", "No: as it computes (bf16, or the run's precision)"},
        {"fp8", "fp8: FP8 E4M3, a scale per 64 weights (1.03 bytes a weight, musubi-tuner's fp8_scaled)"},
        {"int8", "int8: a scale per 64 weights (1.03 bytes a weight)"},
        {"nf4", "nf4: bitsandbytes' 4-bit NormalFloat (0.56 bytes a weight, QLoRA)"}},
       "The frozen blocks' Linear weights stay quantized on the card (or cross to it quantized under ZeRO-3 "
       "offload) and are dequantized layer by layer: about half (fp8, int8) or a quarter (nf4) of the base's "
       "memory, at a small cost in how exactly the base computes. LoRA files and merges use the full-precision "
       "base. The memory panel shows the effect.",
       {"model.base_precision"}, lora},
      {"text_encoder_precision", "method", "Keep the frozen text encoders in fewer bits?", Kind::choice,
       {{"bf16", "No"}, {"fp8", "fp8 (1.03 bytes a weight)"}, {"int8", "int8 (1.03 bytes a weight)"},
        {"nf4", "nf4 (0.56 bytes a weight)"}},
       "Their Linear weights (T5-XXL, Qwen2.5-VL, CLIP) quantized once loaded; with both caches complete they "
       "are read only to fill the caches.",
       {"model.text_encoder_precision"}, text_frozen},
      {"train_text_encoder", "method", "Train the text encoders?", Kind::choice,
       {{"auto", "auto: the tiny model's own trains, a pipeline's stay frozen"},
        {"none", "No: frozen (their outputs can be cached)"},
        {"full", "Yes, every weight"},
        {"lora", "Yes, with LoRA adapters on their attention"}},
       "SD 1.x's text encoder, or SDXL's two together. A trained encoder is sharded, offloaded and checkpointed "
       "like the UNet, and its outputs are not cached.",
       {"training.train_text_encoder"}},
      {"text_encoder_lr", "method", "Text encoders' learning rate (empty: the UNet's)", Kind::text, {},
       "Text encoders usually want less than the UNet (kohya: --text_encoder_lr).", {"optimizer.text_encoder_lr"},
       text_trained},
      {"gradient_checkpointing", "training", "Recompute activations in backward (gradient checkpointing)?", Kind::yes_no,
       {}, "About half the activation memory for one more forward's time.", {"training.gradient_checkpointing"}},
      {"ema", "training", "Keep an EMA of the weights (in CPU memory)?", Kind::yes_no, {}, "", {"ema"}},
      {"sampling_every", "sampling", "Sample images every N steps (0: never)", Kind::integer, {}, "",
       {"sampling.every_n_steps"}},
      {"sampling_prompts", "sampling", "Sampling prompts (one per line)", Kind::lines, {}, "", {"sampling"}, sampling},
      {"checkpoint_every", "output", "Save a checkpoint every N steps (0: only at the end)", Kind::integer, {}, "",
       {"checkpointing.every_n_steps"}},
      {"keep_last", "output", "Keep the newest K checkpoints (0: all)", Kind::integer, {}, "", {"checkpointing"}},
      {"runs_root", "output", "Output folder (runs are created inside it)", Kind::folder, {}, "", {"logging.runs_root"}},
      {"run_name", "output", "Run name (empty: the config's name and the start time)", Kind::text, {}, "",
       {"logging.run_name"}},
  };
}

std::string bool_answer(bool b) { return b ? "yes" : "no"; }

std::string number_text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

/// A YAML flow sequence of double-quoted strings.
std::string quoted_list(const std::string& lines) {
  std::string out = "[";
  std::istringstream in(lines);
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    if (!first) out += ", ";
    first = false;
    out += '"';
    for (char ch : line) {
      if (ch == '"' || ch == '\\') out += '\\';
      if (ch != '\r') out += ch;
    }
    out += '"';
  }
  return out + "]";
}

}  // namespace

const std::vector<std::pair<std::string, std::string>>& setup_pages() {
  static const std::vector<std::pair<std::string, std::string>> pages = {
      {"environment", "Machines"},    {"deepspeed", "DeepSpeed / ZeRO"}, {"processes", "Processes and precision"},
      {"model", "Model"},             {"method", "What to train"},      {"dataset", "Dataset"},
      {"training", "Training"},
      {"sampling", "Sample images"},  {"output", "Checkpoints and output"}};
  return pages;
}

const std::vector<SetupQuestion>& setup_questions() {
  static const std::vector<SetupQuestion> questions = make_questions();
  return questions;
}

const SetupQuestion& setup_question(const std::string& id) {
  for (const auto& q : setup_questions())
    if (q.id == id) return q;
  throw std::out_of_range("no setup question " + id);
}

bool is_asked(const SetupQuestion& q, const SetupAnswers& answers) { return !q.asked || q.asked(answers); }

std::vector<std::pair<std::string, std::string>> question_choices(const SetupQuestion& q, const SetupAnswers& a) {
  const SetupFamily* family = q.id == "model_source" ? find_setup_family(get(a, "model_family")) : nullptr;
  if (!family) return q.choices;
  std::vector<std::pair<std::string, std::string>> out;
  const std::string current = get(a, q.id);
  for (const auto& choice : q.choices)  // the current answer stays (a loaded config's source)
    if (family_offers_source(*family, choice.first) || choice.first == current) out.push_back(choice);
  return out;
}

std::vector<std::string> set_answer(SetupAnswers& a, const std::string& id, const std::string& value) {
  const bool same = get(a, id) == value;
  a[id] = value;
  if (id == "model_source") {
    // A preset of another family (typed, or from a script) takes its family along; the defaults
    // stay as they are (only choosing the family fills them).
    const SetupFamily* f = setup_family_of_preset(value);
    if (!f || f->id == get(a, "model_family")) return {};
    a["model_family"] = f->id;
    return {"model_family"};
  }
  if (same) return {};
  if (id == "model_family")
    if (const SetupFamily* f = find_setup_family(value)) return fill_family_defaults(a, *f);
  if (id == "training_method")
    if (const SetupFamily* f = find_setup_family(get(a, "model_family"))) return follow_training_method(a, *f);
  return {};
}

std::vector<std::string> set_answers_from_settings(SetupAnswers& a, const std::vector<std::string>& settings) {
  // Keys a question carries one to one (booleans as yes/no).
  static const std::map<std::string, std::string> by_key = {
      {"zero.stage", "zero_stage"},
      {"zero.offload_optimizer.device", "offload_optimizer"},
      {"zero.offload_param.device", "offload_param"},
      {"optimizer.type", "optimizer_type"},
      {"optimizer.master_weights", "master_weights"},
      {"optimizer.fused_backward", "fused_backward"},
      {"training.gradient_checkpointing", "gradient_checkpointing"},
      {"training.batch_size", "batch_size"},
      {"data.resolution", "resolution"},
      {"model.base_precision", "base_precision"},
  };
  std::vector<std::string> rest;
  bool zero = false;
  for (const auto& s : settings) {
    const auto eq = s.find('=');
    const std::string key = s.substr(0, eq);
    std::string value = eq == std::string::npos ? std::string() : s.substr(eq + 1);
    const auto it = by_key.find(key);
    if (it == by_key.end()) {
      rest.push_back(s);
      continue;
    }
    if (value == "true") value = "yes";
    if (value == "false") value = "no";
    a[it->second] = value;
    zero = zero || key.starts_with("zero.");
  }
  if (zero) {
    // The ZeRO questions are asked with DeepSpeed on and no DeepSpeed file (whose settings would
    // replace them); stage 0 without offload is the same run without DeepSpeed.
    const bool offload = get(a, "offload_optimizer") != "none" || get(a, "offload_param") != "none";
    a["use_deepspeed"] = as_int(a, "zero_stage") > 0 || offload ? "yes" : "no";
    a["deepspeed_config_file"] = "";
  }
  return rest;
}

SetupAnswers answers_from_config(const TrainerConfig& c) {
  SetupAnswers a;
  a["compute_environment"] = "this_machine";
  const bool dist = c.launch.num_processes > 1 || c.launch.num_machines > 1;
  a["machine_type"] = !dist ? "no" : (c.launch.use_cpu ? "multi_cpu" : "multi_gpu");
  a["num_machines"] = std::to_string(c.launch.num_machines);
  a["machine_rank"] = std::to_string(c.launch.machine_rank);
  a["main_process_ip"] = c.launch.main_process_ip;
  a["main_process_port"] = std::to_string(c.launch.main_process_port);
  a["use_cpu"] = bool_answer(c.launch.use_cpu);
  const bool zero = c.zero.stage > 0;
  a["use_deepspeed"] = bool_answer(zero);
  a["deepspeed_config_file"] = "";
  a["zero_stage"] = std::to_string(zero ? c.zero.stage : 2);  // accelerate's default when turning it on
  a["offload_optimizer"] = c.zero.offload_optimizer.device;
  a["offload_optimizer_nvme_path"] = c.zero.offload_optimizer.nvme_path;
  a["offload_param"] = c.zero.offload_param.device;
  a["offload_param_nvme_path"] = c.zero.offload_param.nvme_path;
  a["gradient_accumulation_steps"] = std::to_string(c.training.gradient_accumulation_steps);
  a["gradient_clipping"] = number_text(c.training.gradient_clipping);
  a["zero3_save_16bit_model"] = bool_answer(c.zero.stage3_gather_16bit_weights_on_model_save);
  a["zero3_init_flag"] = bool_answer(c.zero.zero3_init_flag);
  a["num_processes"] = std::to_string(c.launch.num_processes);
  a["mixed_precision"] = c.precision == "fp32" ? "no" : c.precision;
  const bool single = c.model.path.ends_with(".safetensors");
  a["model_source"] = c.model.path.empty() ? c.model.preset : single ? "file" : "folder";
  a["model_path"] = single ? "" : c.model.path;
  a["model_file"] = single ? c.model.path : "";
  a["model_config_path"] = c.model.config_path;
  a["prediction_type"] = c.model.prediction_type;
  a["timestep_sampling"] = c.training.timestep_sampling;
  a["model_family"] = setup_family_id(c);
  a["data_source"] = c.data.generate == "shapes" ? "shapes" : "folder";
  a["data_path"] = c.data.path;
  a["resolution"] = std::to_string(c.data.resolution);
  a["batch_size"] = std::to_string(c.training.batch_size);
  a["max_steps"] = std::to_string(c.training.max_steps);
  a["epochs"] = c.training.epochs ? std::to_string(*c.training.epochs) : "";
  a["repeats"] = std::to_string(c.data.repeats);
  a["learning_rate"] = number_text(c.optimizer.lr);
  a["optimizer_type"] = c.optimizer.type;
  a["master_weights"] = c.optimizer.master_weights;
  a["fused_backward"] = bool_answer(c.optimizer.fused_backward);
  a["delayed_update"] = bool_answer(c.zero.offload_optimizer.delayed_update);
  a["lr_scheduler"] = c.scheduler.type;
  a["warmup_steps"] = std::to_string(c.scheduler.warmup_steps);
  a["training_method"] = c.training.method;
  a["lora_rank"] = std::to_string(c.lora.rank);
  a["lora_alpha"] = c.lora.alpha ? number_text(*c.lora.alpha) : "";
  std::string targets;  // empty: null, the family's default
  if (c.lora.targets)
    for (const auto& t : *c.lora.targets) targets += t + "\n";
  a["lora_targets"] = targets;
  a["train_text_encoder"] = c.training.train_text_encoder;
  a["base_precision"] = c.model.base_precision;
  a["text_encoder_precision"] = c.model.text_encoder_precision;
  a["text_encoder_lr"] = c.optimizer.text_encoder_lr ? number_text(*c.optimizer.text_encoder_lr) : "";
  a["gradient_checkpointing"] = bool_answer(c.training.gradient_checkpointing);
  a["ema"] = bool_answer(c.ema.enabled);
  a["sampling_every"] = std::to_string(c.sampling.every_n_steps);
  std::string prompts;
  for (const auto& p : c.sampling.prompts) prompts += p + "\n";
  a["sampling_prompts"] = prompts;
  a["checkpoint_every"] = std::to_string(c.checkpointing.every_n_steps);
  a["keep_last"] = std::to_string(c.checkpointing.keep_last);
  a["runs_root"] = c.logging.runs_root;
  a["run_name"] = c.logging.run_name;
  return a;
}

std::vector<std::string> settings_from_answers(const SetupAnswers& a) {
  std::vector<std::string> s;
  auto set = [&](const std::string& key, const std::string& value) { s.push_back(key + "=" + value); };
  auto text = [&](const std::string& key, const std::string& id) { set(key, yaml_scalar(get(a, id))); };
  auto flag = [&](const std::string& key, const std::string& id) { set(key, get(a, id) == "yes" ? "true" : "false"); };
  auto asked = [&](const std::string& id) { return is_asked(setup_question(id), a); };
  // Machines and processes.
  if (!distributed(a)) {
    set("launch.num_processes", "1");
    set("launch.num_machines", "1");
    flag("launch.use_cpu", "use_cpu");
  } else {
    set("launch.use_cpu", get(a, "machine_type") == "multi_cpu" ? "true" : "false");
    text("launch.num_machines", "num_machines");
    text("launch.num_processes", "num_processes");
    if (several_machines(a)) {
      text("launch.machine_rank", "machine_rank");
      text("launch.main_process_ip", "main_process_ip");
      text("launch.main_process_port", "main_process_port");
    } else {
      set("launch.machine_rank", "0");
    }
  }
  // ZeRO: without DeepSpeed, stage 0 and no offload; a DeepSpeed file is applied in apply_answers.
  if (!deepspeed(a)) {
    set("zero.stage", "0");
    set("zero.offload_optimizer.device", "none");
    set("zero.offload_param.device", "none");
  } else if (zero_questions(a)) {
    text("zero.stage", "zero_stage");
    set("zero.offload_optimizer.device", asked("offload_optimizer") ? get(a, "offload_optimizer") : "none");
    if (asked("offload_optimizer_nvme_path")) text("zero.offload_optimizer.nvme_path", "offload_optimizer_nvme_path");
    set("zero.offload_param.device", asked("offload_param") ? get(a, "offload_param") : "none");
    if (asked("offload_param_nvme_path")) text("zero.offload_param.nvme_path", "offload_param_nvme_path");
    text("training.gradient_accumulation_steps", "gradient_accumulation_steps");
    text("training.gradient_clipping", "gradient_clipping");
    if (stage3(a)) {
      flag("zero.stage3_gather_16bit_weights_on_model_save", "zero3_save_16bit_model");
      flag("zero.zero3_init_flag", "zero3_init_flag");
    }
  }
  set("precision", get(a, "mixed_precision") == "no" ? "fp32" : get(a, "mixed_precision"));
  // Training questions.
  if (model_folder(a)) {
    text("model.path", "model_path");
  } else if (model_file(a)) {
    text("model.path", "model_file");
    text("model.config_path", "model_config_path");
  } else {
    set("model.path", "\"\"");
    text("model.preset", "model_source");
  }
  // Each is asked for its kind of model only: the other goes back to its default (a family refuses
  // a key that does not apply set away from it).
  auto reset = [&](const std::string& key) { set(key, std::get<std::string>(find_field(key)->default_value)); };
  if (prediction_applies(a)) {
    text("model.prediction_type", "prediction_type");
    reset("training.timestep_sampling");
  } else {
    reset("model.prediction_type");
    text("training.timestep_sampling", "timestep_sampling");
  }
  if (data_folder(a)) {
    set("data.generate", "none");
    text("data.path", "data_path");
  } else {
    set("data.generate", "shapes");
    set("data.path", "\"\"");
  }
  text("data.resolution", "resolution");
  text("training.batch_size", "batch_size");
  text("training.max_steps", "max_steps");
  set("training.epochs", get(a, "epochs").empty() ? "null" : yaml_scalar(get(a, "epochs")));
  text("data.repeats", "repeats");
  text("optimizer.lr", "learning_rate");
  text("optimizer.type", "optimizer_type");
  set("optimizer.master_weights", bf16(a) ? get(a, "master_weights") : "fp32");
  if (not_fp16(a)) flag("optimizer.fused_backward", "fused_backward");
  if (delayed_applies(a)) flag("zero.offload_optimizer.delayed_update", "delayed_update");
  else set("zero.offload_optimizer.delayed_update", "false");
  text("scheduler.type", "lr_scheduler");
  if (warmup(a)) text("scheduler.warmup_steps", "warmup_steps");
  text("training.method", "training_method");
  if (lora(a)) {
    text("lora.rank", "lora_rank");
    set("lora.alpha", get(a, "lora_alpha").empty() ? "null" : yaml_scalar(get(a, "lora_alpha")));
    const std::string targets = quoted_list(get(a, "lora_targets"));
    set("lora.targets", targets == "[]" ? "null" : targets);
    text("model.base_precision", "base_precision");
  } else {
    reset("model.base_precision");
  }
  text("training.train_text_encoder", "train_text_encoder");
  if (text_frozen(a)) text("model.text_encoder_precision", "text_encoder_precision");
  else reset("model.text_encoder_precision");
  if (text_trained(a))
    set("optimizer.text_encoder_lr", get(a, "text_encoder_lr").empty() ? "null" : yaml_scalar(get(a, "text_encoder_lr")));
  flag("training.gradient_checkpointing", "gradient_checkpointing");
  flag("ema.enabled", "ema");
  text("sampling.every_n_steps", "sampling_every");
  if (sampling(a)) set("sampling.prompts", quoted_list(get(a, "sampling_prompts")));
  text("checkpointing.every_n_steps", "checkpoint_every");
  text("checkpointing.keep_last", "keep_last");
  text("logging.runs_root", "runs_root");
  text("logging.run_name", "run_name");
  return s;
}

SetupResult apply_answers(const SetupAnswers& answers, const std::string& base_yaml) {
  SetupResult r;
  try {
    LoadedConfig loaded = load_config_string(base_yaml.empty() ? "version: 1\n" : base_yaml, "wizard",
                                             settings_from_answers(answers));
    const std::string ds = deepspeed(answers) ? get(answers, "deepspeed_config_file") : "";
    if (!ds.empty()) {
      // Whatever goes wrong in the DeepSpeed file belongs to the question that named it.
      auto blame = [&](std::string message) { r.problems.push_back({{}, "deepspeed_config_file", std::move(message)}); };
      try {
        ImportRequest request;
        request.deepspeed_json = ds;
        request.base = loaded;
        ImportResult imported = import_configs(request);
        loaded = std::move(imported.loaded);
        r.warnings = std::move(imported.warnings);
      } catch (const ConfigError& e) {
        for (const auto& p : e.problems()) blame(p.to_string());
        return r;
      } catch (const std::exception& e) {
        blame(e.what());
        return r;
      }
    }
    r.warnings.insert(r.warnings.end(), loaded.warnings.begin(), loaded.warnings.end());
    // What the config needs before it can train (the run folder is not known yet).
    // (Not the model's files: the wizard asks this on every change; `train` reads them.)
    for (const auto& p : trainability_problems(loaded, "", ModelFiles::skip))
      r.warnings.push_back(p.key + ": " + p.message + " (needed before training)");
    r.loaded = std::move(loaded);  // the loader validated it (every rule, one source of truth)
  } catch (const ConfigError& e) {
    r.problems = e.problems();
  } catch (const std::exception& e) {
    r.problems.push_back({{}, "", e.what()});
  }
  return r;
}

std::vector<std::string> questions_for_problem(const ConfigProblem& p, const SetupAnswers& answers) {
  std::vector<std::string> ids;
  auto covers = [&](const std::string& key) {
    return p.key == key || (p.key.size() > key.size() && p.key.compare(0, key.size(), key) == 0 && p.key[key.size()] == '.');
  };
  for (const auto& q : setup_questions()) {
    if (!is_asked(q, answers)) continue;
    for (const auto& key : q.keys)
      if (covers(key)) {
        ids.push_back(q.id);
        break;
      }
  }
  if (!ids.empty()) return ids;
  // Nothing asks for that key exactly: the first question on the same section.
  const std::string section = p.key.substr(0, p.key.find('.'));
  for (const auto& q : setup_questions())
    if (is_asked(q, answers))
      for (const auto& key : q.keys)
        if (key.substr(0, key.find('.')) == section) return {q.id};
  return {};
}

LoadedConfig load_any_config(const std::string& path) {
  const bool json = path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  bool accelerate = false;
  if (!json) {
    YAML::Node root;
    try {
      root = YAML::LoadFile(path);
    } catch (const std::exception&) {
      return load_config_file(path);  // let the loader say what is wrong, with the line
    }
    accelerate = root.IsMap() && (root["distributed_type"] || root["compute_environment"]);
  }
  if (!json && !accelerate) return load_config_file(path);
  ImportRequest request;
  (json ? request.deepspeed_json : request.accelerate_yaml) = path;
  return import_configs(request).loaded;
}

}  // namespace zs::config
