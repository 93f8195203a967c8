// Helper process for tst_dist: joins the world described by torchrun's environment variables
// and runs one scenario. Prints "ok" and exits 0 on success; prints the error and exits 3 on a
// zs::Error (so the test can read the message), 1 on a wrong result.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/memory.h"
#include "checkpoint/sharded_state.h"
#include "comm/communicator.h"
#include "io/safetensors.h"
#include "models/clip_text_model.h"
#include "models/flux/flux_transformer.h"
#include "models/qwen_image/qwen_transformer.h"
#include "models/autoencoder_kl.h"
#include "models/flux2/flux2_transformer.h"
#include "models/z_image/z_image_transformer.h"
#include "models/quantized_base.h"
#include "quant/base_quant.h"
#include "models/lora.h"
#include "models/sd/sd_family.h"
#include "models/sd/unet_2d_condition.h"
#include "train/loss_scaler.h"
#include "zero/zero_plan.h"
#include "zero/reference_adafactor.h"
#include "zero/reference_adamw.h"
#include "zero/reference_delay.h"
#include "zero/reference_ema.h"
#include "zero/zero_optimizer.h"

using namespace zs;

namespace {

bool check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "wrong result: %s\n", what);
  return ok;
}

/// Every collective on tensors at `device` (cpu, or cuda: NCCL's own, or Gloo's CUDA path), and
/// the trainer's kind of small CPU tensors next to them (NCCL stages those through the device).
int collectives(comm::Communicator& c, const at::Device& device) {
  const int r = c.rank(), n = c.world_size();
  const auto on = at::TensorOptions().device(device);
  bool ok = true;
  at::Tensor t = at::full({5}, r + 1.0, on);
  c.all_reduce(t);
  ok &= check(at::allclose(t.cpu(), at::full({5}, n * (n + 1) / 2.0)), "all_reduce");
  // all_gather: shard of 3 values [r, r, r] -> flat [0,0,0,1,1,1,...]
  at::Tensor flat = at::zeros({3 * n}, on);
  c.all_gather(at::full({3}, static_cast<double>(r), on), flat);
  ok &= check(at::equal(flat.cpu(), at::arange(n, at::kFloat).repeat_interleave(3)), "all_gather");
  // reduce_scatter: each rank contributes arange(2n) * (r + 1); chunk r summed.
  at::Tensor shard = at::zeros({2}, on);
  c.reduce_scatter(at::arange(2 * n, on.dtype(at::kFloat)) * (r + 1), shard);
  ok &= check(at::allclose(shard.cpu(), at::arange(2 * r, 2 * r + 2, at::kFloat) * (n * (n + 1) / 2.0)), "reduce_scatter");
  at::Tensor b = at::full({4}, static_cast<double>(r * 10), on);
  c.broadcast(b, n - 1);
  ok &= check(at::equal(b.cpu(), at::full({4}, (n - 1) * 10.0)), "broadcast");
  // bf16 on the device and a CPU double, as the trainer's parameters and losses.
  at::Tensor h = at::full({3}, r + 1.0, on.dtype(at::kBFloat16));
  c.all_reduce(h);
  ok &= check(at::equal(h.cpu().to(at::kFloat), at::full({3}, n * (n + 1) / 2.0)), "all_reduce bf16");
  at::Tensor d = at::full({1}, 0.5 * r, at::kDouble);
  c.all_reduce(d);
  ok &= check(d.device().is_cpu() && d.item<double>() == 0.25 * n * (n - 1), "all_reduce of a CPU double");
  // In place, as the optimizer gathers its updated shards: the input is the rank's own chunk.
  const std::int64_t m = 1'000'003;
  at::Tensor whole = at::zeros({m * n}, on);
  whole.narrow(0, r * m, m).fill_(r + 1.0);
  c.all_gather(whole.narrow(0, r * m, m), whole);
  ok &= check(at::equal(whole.cpu(), (at::arange(n, at::kFloat) + 1).repeat_interleave(m)), "all_gather in place");
  at::Tensor bytes = at::full({2}, r, at::kByte), all_bytes = at::zeros({2 * n}, at::kByte);
  c.all_gather(bytes, all_bytes);
  ok &= check(all_bytes[2 * n - 1].item<int>() == n - 1, "all_gather of CPU bytes");
  c.barrier();
  return ok ? 0 : 1;
}

/// A two-level UNet (cross-attention down with two-block transformers, plain down) with
/// `channels` wide blocks, seeded.
models::UNet2DConditionModel two_level_unet(std::uint64_t seed, std::int64_t in, std::vector<std::int64_t> channels,
                                            std::int64_t layers, std::int64_t cross, std::vector<std::int64_t> heads,
                                            std::int64_t groups) {
  at::manual_seed(seed);
  models::UNetConfig c;
  c.in_channels = c.out_channels = in;
  c.block_out_channels = std::move(channels);
  c.down_block_types = {"CrossAttnDownBlock2D", "DownBlock2D"};
  c.up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D"};
  c.layers_per_block = layers;
  c.cross_attention_dim = cross;
  c.num_attention_heads = std::move(heads);
  c.transformer_layers_per_block = {2, 1};  // two blocks: split into one unit each, as SDXL's
  c.norm_num_groups = groups;
  return models::UNet2DConditionModel(c);
}

/// The model of the exactness scenarios.
models::UNet2DConditionModel small_unet() { return two_level_unet(11, 3, {16, 32}, 1, 16, {2, 4}, 8); }

/// A small Flux.1 transformer ([dev]-shaped: guidance embedding; two blocks of each kind, 16
/// wide) on the same 3-channel 8 × 8 samples, packed 2×2 into 16 tokens of 12 values.
models::FluxTransformer2DModel small_flux() {
  at::manual_seed(11);
  models::FluxConfig c;
  c.in_channels = c.out_channels = 12;
  c.num_layers = 2;
  c.num_single_layers = 2;
  c.attention_head_dim = 8;
  c.num_attention_heads = 2;
  c.joint_attention_dim = 16;
  c.pooled_projection_dim = 16;
  c.guidance_embeds = true;
  c.axes_dims_rope = {2, 2, 4};
  return models::FluxTransformer2DModel(c);
}

/// A small Qwen-Image transformer (two dual-stream blocks, 16 wide) on the same samples.
models::QwenImageTransformer2DModel small_qwen() {
  at::manual_seed(11);
  models::QwenImageConfig c;
  c.in_channels = 12;
  c.out_channels = 3;
  c.num_layers = 2;
  c.attention_head_dim = 8;
  c.num_attention_heads = 2;
  c.joint_attention_dim = 16;
  c.axes_dims_rope = {2, 2, 4};
  return models::QwenImageTransformer2DModel(c);
}

/// A small Z-Image transformer (a noise and a context refiner block, two main blocks, 16 wide) on the
/// same 3-channel samples.
models::ZImageTransformer2DModel small_z_image() {
  at::manual_seed(11);
  models::ZImageConfig c;
  c.in_channels = 3;
  c.dim = 16;
  c.n_layers = 2;
  c.n_refiner_layers = 1;
  c.n_heads = 2;
  c.cap_feat_dim = 16;
  c.axes_dims = {2, 2, 4};
  return models::ZImageTransformer2DModel(c);
}

/// A small FLUX.2 transformer (one double-stream and two single-stream blocks, 16 wide, no guidance
/// embedding) on the same samples 2×2-patchified: 12 channels a token.
models::Flux2Transformer2DModel small_flux2() {
  at::manual_seed(11);
  models::Flux2Config c;
  c.in_channels = 12;
  c.out_channels = 12;
  c.num_layers = 1;
  c.num_single_layers = 2;
  c.attention_head_dim = 8;
  c.num_attention_heads = 2;
  c.joint_attention_dim = 16;
  c.timestep_guidance_channels = 32;
  c.axes_dims_rope = {2, 2, 2, 2};
  c.guidance_embeds = false;
  return models::Flux2Transformer2DModel(c);
}

/// The denoiser of the exactness scenario — a UNet, or a Flux.1, Qwen-Image, Z-Image or FLUX.2
/// transformer — as the trainer sees it: units, hooks and checkpointing (every family's
/// DenoiserModule), LoRA targets and one forward from (x, t, context) in its family's arrangement.
struct Denoiser {
  std::string kind;  ///< unet, flux, qwen, zimage, flux2
  models::UNet2DConditionModel unet{nullptr};
  models::FluxTransformer2DModel flux{nullptr};
  models::QwenImageTransformer2DModel qwen{nullptr};
  models::ZImageTransformer2DModel z_image{nullptr};
  models::Flux2Transformer2DModel flux2{nullptr};
  models::DenoiserModule* module = nullptr;
  explicit Denoiser(std::string k) : kind(std::move(k)) {
    if (kind == "zimage") module = (z_image = small_z_image()).ptr().get();
    else if (kind == "qwen") module = (qwen = small_qwen()).ptr().get();
    else if (kind == "flux") module = (flux = small_flux()).ptr().get();
    else if (kind == "flux2") module = (flux2 = small_flux2()).ptr().get();
    else module = (unet = small_unet()).ptr().get();
  }
  torch::nn::Module* operator->() const { return module; }
  torch::nn::Module& operator*() const { return *module; }
  std::vector<models::ParamUnit> units() const { return module->units(); }
  void set_unit_hooks(std::shared_ptr<models::UnitHooks> h) { module->set_unit_hooks(std::move(h)); }
  void set_gradient_checkpointing(bool on) { module->set_gradient_checkpointing(on); }
  /// The trainer's LoRA targets: the UNet's attention and resnets' conv1, each transformer family's default.
  std::vector<std::string> lora_targets() const {
    if (z_image) return {"to_q", "to_k", "to_v", "to_out.0", "w1", "w2", "w3"};  // DiffSynth's (the family default)
    if (flux2) return {"to_q", "to_k", "to_v", "to_out.0", "to_qkv_mlp_proj", "to_out"};  // diffusers' klein script's
    if (qwen) return {"to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj", "to_out.0", "to_add_out",
                      "img_mlp.net.2", "img_mod.1", "txt_mlp.net.2", "txt_mod.1"};  // the seed's (DiffSynth's)
    if (flux) return {"to_q", "to_k", "to_v", "to_out.0", "add_q_proj", "add_k_proj", "add_v_proj", "to_add_out",
                      "ff.net.0.proj", "ff.net.2", "ff_context.net.0.proj", "ff_context.net.2"};
    return {"to_q", "to_k", "to_v", "to_out.0", "conv1"};
  }
  /// The prediction for samples `x` [B, 3, 8, 8] at timesteps `t` [B] in [0, 1000) under `ctx`
  /// [B, 4, 16]: Flux sees σ = t / 1000, the packed tokens, the context's mean as the pooled
  /// embedding and guidance 1 (FluxModel::predict's arrangement).
  at::Tensor forward(const at::Tensor& x, const at::Tensor& t, const at::Tensor& ctx) {
    if (z_image) {
      // ZImageModel::predict's arrangement on the model's own time 1 − σ, odd samples' captions a
      // token shorter (masked as keys, the batch padded).
      at::Tensor mask = at::ones({x.size(0), ctx.size(1)}, at::kLong);
      for (std::int64_t i = 1; i < x.size(0); i += 2) mask[i][ctx.size(1) - 1] = 0;
      return -z_image->forward(x.contiguous(), ctx, mask, 1 - t.to(x.scalar_type()) / 1000.0);
    }
    if (flux2) {
      // Flux2Model::predict's arrangement on the samples 2×2-patchified (as the pipelines' latents):
      // h·w tokens, σ = t / 1000, the grid's and the text's ids, every text row attended to.
      const at::Tensor patched = models::patchify_2x2(x.contiguous());
      const std::int64_t b = patched.size(0), c = patched.size(1), h = patched.size(2), w = patched.size(3);
      const at::Tensor tokens = patched.reshape({b, c, h * w}).permute({0, 2, 1}).contiguous();
      const at::Tensor out = flux2->forward(tokens, ctx, t.to(x.scalar_type()) / 1000.0,
                                            models::flux2_image_ids(h, w, x.options()),
                                            models::flux2_text_ids(ctx.size(1), x.options()));
      return models::unpatchify_2x2(out.permute({0, 2, 1}).reshape({b, c, h, w}));
    }
    if (qwen) {
      // QwenImageModel::predict's arrangement, with captions of their own lengths: odd samples' last
      // context token is padding (masked out).
      const at::Tensor tokens = models::pack_latents_2x2(x.contiguous());
      at::Tensor mask = at::ones({x.size(0), ctx.size(1)}, at::kLong);
      for (std::int64_t i = 1; i < x.size(0); i += 2) mask[i][ctx.size(1) - 1] = 0;
      const at::Tensor out = qwen->forward(tokens, ctx, mask, t.to(at::kDouble) / 1000.0, x.size(2) / 2, x.size(3) / 2);
      return models::unpack_latents_2x2(out, x.size(2), x.size(3));
    }
    if (!flux) return unet->forward(x, t, ctx);
    const auto opts = x.options();
    const at::Tensor tokens = models::pack_latents_2x2(x.contiguous());
    const at::Tensor out = flux->forward(tokens, ctx, ctx.mean(1), t.to(at::kDouble) / 1000.0,
                                         models::flux_image_ids(x.size(2) / 2, x.size(3) / 2, opts),
                                         at::zeros({ctx.size(1), 3}, opts), at::ones({x.size(0)}, opts));
    return models::unpack_latents_2x2(out, x.size(2), x.size(3));
  }
};

/// Variations of the ZeRO run, from a comma-separated list: f64 (float64 instead of float32),
/// bf16 (bf16 compute with fp32 masters), ckpt (activation checkpointing on the sharded model
/// only), opt=cpu|nvme and param=cpu|nvme (offload), nvme=DIR (the NVMe folder), subgroup=N,
/// cuda (the ZeRO model computes on the GPU; the reference stays on the CPU), nccl (NCCL
/// instead of Gloo, a real group even for one rank; implies cuda), lora (LoRA training: rank-4
/// adapters on the attention projections and the resnets' conv1; the base frozen, given to the
/// optimizer as frozen units, so stage 3 partitions it), te=full|lora (a small CLIP text encoder
/// makes the UNet's context from token ids and trains in full, or through adapters on its
/// attention projections), flux (the denoiser is a small Flux.1 transformer instead of the UNet),
/// qwen (a small Qwen-Image transformer, its odd samples' context padded and masked), zimage (a
/// small Z-Image transformer, likewise), flux2 (a small FLUX.2 transformer on patchified samples), adafactor
/// (Adafactor with beta1, weight decay and scale_parameter, against ReferenceAdafactor), adam8 (8-bit
/// AdamW, against one process's ZeroOptimizer at stage 0, whose step tst_zero holds to bitsandbytes'),
/// nomaster (bf16 weights without fp32 masters, updates rounded stochastically: against one
/// process's ZeroOptimizer at stage 0 with the same settings, in bf16 steps), nooverlap
/// (zero.overlap_comm off: no unit boundaries in the autograd graph), nomaster_cos (no masters,
/// held to the fp32 reference by the cosine of the updates, as bf16), fused (optimizer.fused_backward:
/// units step from their backward hooks; the reference clips by the previous step's norm).
struct Variant {
  bool f64 = false, bf16 = false, ckpt = false, cuda = false, nccl = false, lora = false;
  std::string denoiser = "unet";  ///< flux, qwen, zimage, flux2: a transformer family's instead
  bool adafactor = false, adam8 = false, nomaster = false, nooverlap = false, nomaster_cos = false, fused = false;
  bool delayed = false;  // zero.offload_optimizer.delayed_update after 2 ordinary steps
  std::string te;  // "", full or lora
  quant::BaseFormat base = quant::BaseFormat::bf16;  // lora: the frozen blocks quantized (model.base_precision)
  zero::ZeroOptions::Offload opt = zero::ZeroOptions::Offload::none, param = zero::ZeroOptions::Offload::none;
  std::string nvme;
  std::int64_t sub_group = 1'000'000'000;
  explicit Variant(const std::string& list) {
    std::stringstream ss(list);
    auto device = [](const std::string& v) {
      return v == "cpu" ? zero::ZeroOptions::Offload::cpu : zero::ZeroOptions::Offload::nvme;
    };
    for (std::string f; std::getline(ss, f, ',');) {
      if (f == "f64") f64 = true;
      else if (f == "bf16") bf16 = true;
      else if (f == "ckpt") ckpt = true;
      else if (f == "cuda") cuda = true;
      else if (f == "nccl") nccl = cuda = true;
      else if (f == "lora") lora = true;
      else if (f == "flux" || f == "qwen" || f == "zimage" || f == "flux2") denoiser = f;
      else if (f == "adafactor") adafactor = true;
      else if (f == "adam8") adam8 = true;
      else if (f == "nomaster") nomaster = bf16 = true;
      else if (f == "nooverlap") nooverlap = true;
      else if (f == "nomaster_cos") nomaster_cos = bf16 = true;
      else if (f == "fused") fused = true;
      else if (f == "delayed") delayed = true;
      else if (f.rfind("te=", 0) == 0) te = f.substr(3);
      else if (f.rfind("base=", 0) == 0) base = quant::base_format_from_string(f.substr(5));
      else if (f.rfind("opt=", 0) == 0) opt = device(f.substr(4));
      else if (f.rfind("param=", 0) == 0) param = device(f.substr(6));
      else if (f.rfind("nvme=", 0) == 0) nvme = f.substr(5);
      else if (f.rfind("subgroup=", 0) == 0) sub_group = std::stoll(f.substr(9));
      else if (!f.empty() && f != "f32") throw Error(ErrorKind::config, "dist_worker: unknown variant " + f);
    }
  }
};

/// The lean optimizers' settings for a variant: Adafactor with every statistic it reduces across
/// shards in play (the first moment, the parameter scale, the update clip at RMS 1), or 8-bit AdamW.
zero::AdafactorOptions lean_options(const Variant& v, zero::ZeroOptions& o) {
  zero::AdafactorOptions af;
  af.beta1 = 0.9;
  af.weight_decay = 0.01;
  af.scale_parameter = true;
  if (v.adafactor) {
    o.optimizer = zero::OptimizerType::adafactor;
    o.adafactor = af;
  }
  if (v.adam8) o.optimizer = zero::OptimizerType::adamw8bit;
  return af;
}

/// Files under a folder (recursively); -1 when it does not exist.
long count_files(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) return -1;
  long n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) n += e.is_regular_file();
  return n;
}

/// 5 AdamW steps under ZeRO `stage` against one process training the whole batch; prints the
/// model-state bytes for the memory test.
int zero_exactness(comm::Communicator& c, int stage, int accum, double clip, const Variant& v,
                   std::vector<std::string>& nvme_dirs) {
  const bool f64 = v.f64;
  const int rank = c.rank(), world = c.world_size();
  Denoiser unet(v.denoiser);
  Denoiser ref(v.denoiser);  // same seed, same initial weights
  const auto dtype = f64 ? at::kDouble : at::kFloat;
  unet->to(dtype);
  ref->to(dtype);
  zero::ZeroOptions o;
  o.persistence_threshold = 0;  // every unit sharded at stage 3 (zero.stage3_param_persistence_threshold: 0)
  o.stage = stage;
  o.weight_decay = 0.01;
  // Adam's first steps are close to sign descent, so last-bit differences in a gradient element
  // near zero (kernels on differently aligned buffers, another summation order) can move it by a
  // noticeable part of lr: float32 agrees to ~1e-5; float64 shows the sharding itself is exact.
  o.eps = 1e-8;
  o.reduce_bucket_size = 3000;  // several buckets on this small model
  o.allgather_bucket_size = 20000;
  if (v.bf16) o.compute_dtype = at::kBFloat16;
  o.master_weights = !v.nomaster && !v.nomaster_cos;
  if (v.nooverlap) o.overlap_comm = false;
  o.fused_backward = v.fused;
  o.delayed_update = v.delayed;
  o.delayed_update_warmup = 2;
  o.seed = 42;
  const at::Device dev = v.cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU);
  if (v.cuda) {
    o.device = dev;  // the parameters move there unit by unit
    // float32 on the GPU must be float32 against the CPU reference (as tst_cuda's NoTf32): cuDNN's
    // convolutions use TF32 by default, ~5e-4 relative per product. (TF32 was not what moved the
    // H200's float32 offload rows: they differed as much with it off; see the tolerances below.)
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  o.offload_optimizer = v.opt;
  o.offload_param = v.param;
  o.optimizer_nvme_path = o.param_nvme_path = v.nvme;
  o.sub_group_size = v.sub_group;
  o.run_tag = "dist-test";
  o.log = [](const std::string& line) { std::printf("log %s\n", line.c_str()); };
  const zero::AdafactorOptions af = lean_options(v, o);
  std::vector<std::pair<std::string, at::Tensor>> ref_params, live_params;
  std::vector<models::ParamUnit> units = unet.units();
  std::map<std::string, at::Tensor> base_before;
  std::vector<std::vector<std::pair<std::string, at::Tensor>>> base_lists;  // each base unit's tensors
  models::LoraOptions lo;
  lo.rank = 4;
  lo.alpha = 8;
  if (v.lora) {
    // The same adapters on both sides (one seed), in the compute dtype; the optimizer sees the
    // base as frozen units (partitioned at stage 3) and one unit of adapters, kept whole.
    for (auto* m : {&unet, &ref}) models::attach_lora(**m, unet.lora_targets(), lo, 7, dtype);
    for (auto& u : units) u.frozen = true;
    if (v.base != quant::BaseFormat::bf16) {
      // base=FORMAT: the blocks' Linear weights kept quantized (every unit but io, as the trainer
      // does); the reference computes with plain Linear layers holding their dequantized values.
      models::BaseQuantizer quantizer(*unet, v.base);
      for (std::size_t i = 1; i < units.size(); ++i) quantizer.quantize(units[i]);
      std::map<std::string, torch::nn::Module*> ref_modules;
      for (const auto& m : ref->named_modules()) ref_modules[m.key()] = m.value().get();
      c10::NoGradGuard no_grad;
      for (const auto& m : unet->named_modules())
        if (auto* l = dynamic_cast<models::AdaptedLinearImpl*>(m.value().get()); l && l->quantized) {
          auto& w = dynamic_cast<models::AdaptedLinearImpl&>(*ref_modules.at(m.key())).weight;
          w.copy_(quant::dequantize(*l->quantized).to(w.scalar_type()));
        }
    }
    for (const auto& u : units) {
      base_lists.push_back(u.parameters);
      for (const auto& [name, p] : u.parameters) base_before[name] = p.detach().clone();
    }
    units.push_back(models::lora_unit(*unet, "lora_unet", ""));
    ref_params = models::lora_unit(*ref, "lora_unet", "").parameters;
    o.persistent_units.push_back("lora_unet");
  } else {
    for (const auto& p : ref->named_parameters()) ref_params.emplace_back(p.key(), p.value());
  }
  // The text encoder (te=full|lora): the same weights on both sides; the context comes from it.
  models::ClipTextModel te{nullptr}, ref_te{nullptr};
  if (!v.te.empty()) {
    models::ClipTextConfig tc;
    tc.vocab_size = 40;
    tc.hidden_size = 16;
    tc.intermediate_size = 32;
    tc.num_attention_heads = 2;
    tc.num_hidden_layers = 2;
    tc.max_position_embeddings = 4;
    tc.eos_token_id = 39;
    te = models::ClipTextModel(tc);
    ref_te = models::ClipTextModel(tc);
    te->to(dtype);
    ref_te->to(dtype);
    {
      c10::NoGradGuard no_grad;
      auto from = te->named_parameters();
      for (auto& p : ref_te->named_parameters()) p.value().copy_(from[p.key()]);
    }
    if (v.te == "lora") {
      for (auto* m : {&te, &ref_te}) models::attach_lora(**m, {"q_proj", "k_proj", "v_proj", "out_proj"}, lo, 8, dtype);
      units.push_back(models::lora_unit(*te, "lora_text_encoder", "text_encoder."));
      for (auto& p : models::lora_unit(*ref_te, "lora_text_encoder", "text_encoder.").parameters) ref_params.push_back(p);
      o.persistent_units.push_back("lora_text_encoder");
    } else {
      models::ParamUnit text{"text_encoder", {}};
      for (const auto& p : te->named_parameters()) text.parameters.emplace_back("text_encoder." + p.key(), p.value());
      for (const auto& p : ref_te->named_parameters()) ref_params.emplace_back("text_encoder." + p.key(), p.value());
      units.push_back(std::move(text));
    }
    units.back().lr_scale = 0.5;  // optimizer.text_encoder_lr = lr / 2
    te->to(dev);
  }
  for (const auto& u : units)
    if (!u.frozen) live_params.insert(live_params.end(), u.parameters.begin(), u.parameters.end());
  zero::ZeroOptimizer opt(std::move(units), c, o);
  nvme_dirs = opt.nvme_dirs();
  // Stage 3 gathers through the hooks (LoRA: the frozen base's units); every stage overlaps its
  // reduction there (the units after the UNet's are reduced after backward).
  unet.set_unit_hooks(opt.unit_hooks());
  unet.set_gradient_checkpointing(v.ckpt);  // stage 3 must gather a unit again for its rerun
  const std::size_t unet_units = unet.units().size();
  if (stage == 3 && !v.lora && !check(opt.sharded_units() + 1 == unet_units, "every unit but io is sharded")) return 1;
  if (v.lora && !check(opt.sharded_units() == 0, "the LoRA unit is kept whole")) return 1;
  if (v.lora && stage == 3 && !check(opt.sharded_frozen_units() + 1 == unet_units, "every base unit but io is sharded"))
    return 1;
  // The context of rows [from, from + n): the text encoder's output for their token ids, or the
  // random context itself.
  auto context = [&](models::ClipTextModel& enc, const at::Tensor& ctx, const at::Tensor& ids, std::int64_t from,
                     std::int64_t n, const at::Device& where) {
    if (!enc) return ctx.narrow(0, from, n).to(where);
    return enc->forward(ids.narrow(0, from, n).to(where)).last_hidden_state;
  };
  // The reference optimizer: ReferenceAdamW, ReferenceAdafactor, or (8-bit AdamW) one process's
  // ZeroOptimizer at stage 0 over the reference's units, cut as the model's.
  struct Reference {
    std::function<void()> zero_grad;
    std::function<double(double)> clip;
    std::function<void(double)> step;
  } ref_opt;
  std::unique_ptr<zero::ReferenceAdamW> ref_adamw;
  std::unique_ptr<zero::ReferenceAdafactor> ref_adafactor;
  std::unique_ptr<comm::Communicator> ref_comm;
  std::unique_ptr<zero::ZeroOptimizer> ref_zero;
  if (v.adam8 || v.nomaster) {
    if (v.lora || !v.te.empty()) throw Error(ErrorKind::config, "dist_worker: adam8 and nomaster run on the plain denoiser only");
    zero::ZeroOptions ro;
    lean_options(v, ro);
    ro.weight_decay = 0.01;
    ro.compute_dtype = o.compute_dtype;
    ro.master_weights = o.master_weights;
    ro.seed = o.seed;
    ref_comm = comm::Communicator::single();
    ref_zero = std::make_unique<zero::ZeroOptimizer>(ref.units(), *ref_comm, ro);
    ref_opt = {[&] { ref_zero->zero_grad(); }, [&](double c) { ref_zero->reduce_gradients(); return ref_zero->clip_grad_norm(c); },
               [&](double lr) { ref_zero->step(lr); }};
  } else if (v.adafactor) {
    if (!v.te.empty()) throw Error(ErrorKind::config, "dist_worker: adafactor has no text-encoder learning rate here");
    ref_adafactor = std::make_unique<zero::ReferenceAdafactor>(ref_params, af);
    auto clip_all = [&](double max_norm) {
      c10::NoGradGuard no_grad;
      double sq = 0;
      for (auto& [name, p] : ref_params) sq += p.grad().to(at::kDouble).pow(2).sum().item<double>();
      const double norm = std::sqrt(sq);
      if (max_norm > 0 && norm > max_norm)
        for (auto& [name, p] : ref_params) p.mutable_grad().mul_(max_norm / (norm + 1e-6));
      return norm;
    };
    ref_opt = {[&] {
                 for (auto& [name, p] : ref_params)
                   if (p.grad().defined()) p.mutable_grad().zero_();
               },
               clip_all, [&](double lr) { ref_adafactor->step(lr); }};
  } else {
    ref_adamw = std::make_unique<zero::ReferenceAdamW>(ref_params, 0.9, 0.999, 1e-8, 0.01);
    if (!v.te.empty()) ref_adamw->set_lr_scale("text_encoder.", 0.5);
    ref_opt = {[&] { ref_adamw->zero_grad(); }, [&](double c) { return ref_adamw->clip_grad_norm(c); },
               [&](double lr) { ref_adamw->step(lr); }};
  }
  opt.enable_ema(0.8);
  zero::ReferenceEma ref_ema(ref_params, 0.8);
  const std::int64_t G = 12, per_rank = G / world, micro = per_rank / accum;
  double previous_ref_norm = -1;
  // delayed (after 2 ordinary steps, as o.delayed_update_warmup): each update one step late.
  zero::ReferenceDelay delay(ref_params, v.delayed ? 2 : std::numeric_limits<std::int64_t>::max());
  for (int step = 0; step < 5; ++step) {
    at::Generator gen = at::detail::createCPUGenerator(100 + step);
    const at::Tensor x = at::randn({G, 3, 8, 8}, gen).to(dtype), target = at::randn({G, 3, 8, 8}, gen).to(dtype);
    const at::Tensor t = at::randint(0, 1000, {G}, gen, at::kLong), ctx = at::randn({G, 4, 16}, gen).to(dtype);
    const at::Tensor ids = at::randint(0, 40, {G, 4}, gen, at::kLong);
    opt.zero_grad();
    opt.prepare_fused_step(1e-3, clip);
    for (int k = 0; k < accum; ++k) {
      opt.set_last_micro_step(k == accum - 1);
      const std::int64_t from = rank * per_rank + k * micro;
      const at::Tensor out = unet.forward(x.narrow(0, from, micro).to(dev), t.narrow(0, from, micro).to(dev),
                                          context(te, ctx, ids, from, micro, dev));
      ((out - target.narrow(0, from, micro).to(dev)).pow(2).mean() / accum).backward();
    }
    if (v.fused) {
      // The hooks stepped every unit but io (it runs at both ends of the forward), the units after
      // the denoiser's (LoRA's adapters are one such unit: it steps in step()) and the one whose
      // hook ran last (a unit steps when the next hook runs, or at the end of backward).
      const std::size_t stepped = opt.units_stepped(), hooked = v.lora ? 0 : unet.units().size() - 2;
      if (step == 0) std::printf("fused: %zu units stepped during backward\n", stepped);
      if (!check(stepped >= hooked, "every hooked unit stepped during backward")) return 1;
    }
    opt.reduce_gradients();
    const double norm = opt.clip_grad_norm(clip);
    opt.step(1e-3);
    // The reference: one process, the same samples in the same micro-batches (as gradient
    // accumulation would run them), gradients summed and divided by the number of ranks.
    // Each rank's gradient is accumulated on its own, then the ranks' sums are added in rank order.
    std::vector<at::Tensor> total(ref_params.size());
    delay.begin_forward();  // delayed: the weights one update behind the masters
    for (int r = 0; r < world; ++r) {
      ref_opt.zero_grad();
      for (int k = 0; k < accum; ++k) {
        const std::int64_t from = r * per_rank + k * micro;
        const at::Tensor out =
            ref.forward(x.narrow(0, from, micro), t.narrow(0, from, micro), context(ref_te, ctx, ids, from, micro, at::kCPU));
        ((out - target.narrow(0, from, micro)).pow(2).mean() / accum).backward();
      }
      c10::NoGradGuard no_grad;
      for (std::size_t i = 0; i < ref_params.size(); ++i) {
        const at::Tensor g = ref_params[i].second.grad();
        total[i] = r == 0 ? g.clone() : total[i] + g;
      }
    }
    {
      c10::NoGradGuard no_grad;
      for (std::size_t i = 0; i < ref_params.size(); ++i) ref_params[i].second.mutable_grad().copy_(total[i]).div_(world);
    }
    delay.end_backward();
    if (step == 0)
      for (const auto& d : nvme_dirs) std::printf("nvme_files %ld %s\n", count_files(d), d.c_str());
    // fused_backward clips by the previous step's norm (the first step unclipped).
    const double ref_norm = ref_opt.clip(v.fused ? 0.0 : clip);
    if (v.fused && clip > 0 && previous_ref_norm > clip) {
      c10::NoGradGuard no_grad;
      for (auto& [name, p] : ref_params) p.mutable_grad().mul_(clip / (previous_ref_norm + 1e-6));
    }
    previous_ref_norm = ref_norm;
    delay.before_step(step + 1);
    ref_opt.step(1e-3);
    opt.update_ema();
    ref_ema.update(delay.held());  // the EMA follows the weights the device holds
    if (v.delayed && !check(opt.delayed_pending() == (step + 1 > 2), "an update is pending after each delayed step"))
      return 1;
    if (std::abs(norm - ref_norm) > (v.bf16 ? 2e-2 : 1e-5) * ref_norm) {
      std::fprintf(stderr, "grad norm %g vs reference %g at step %d\n", norm, ref_norm, step);
      return 1;
    }
  }
  // bf16: the updates' cosine with fp32's at least 0.95. CUDA against the CPU reference: the
  // timestep embedding is computed in float32 whatever the model's dtype (as diffusers does), and
  // CUDA's exp/sin/cos differ from the CPU's in the last bit; Adam's first steps amplify that
  // (measured on an H100: 3.6e-5 in float64, 1.5e-4 to 2e-4 for the float32 EMA; the float32 rows on one device: 2e-5).
  // On an H200 (issue 39, two sessions, TF32 off) the float32 rows with the optimizer in CPU
  // memory landed at 5.2e-4 to 6.9e-4: cuDNN's float32 convolutions sum in another order than the
  // CPU's (and not the same way run to run), and Adam's first steps are near sign descent for
  // gradients near zero, so a few elements move by a part of lr (1e-3 of a weight of order 0.1 is
  // 1e-2 relative; a wrong shard or a missed reduction shows as that or more).
  // 8-bit moments on CUDA: a last-bit difference can move a value across a code boundary, and
  // the element's update then changes by up to the dynamic map's gap at that value — near a
  // block's small values a tenth of the moment — times lr, and such crossings add up over the
  // steps; on the H200 the EMA of the float64 row differed by 1.3e-4, then by 1.03e-3 in another
  // run (the weights passed 1e-4 in both).
  const double cuda_tolerance = v.adam8 ? 3e-3 : f64 ? 1e-4 : 1e-3;
  // float32 on the CPU: 5e-5. Four ranks sum a gradient in another order than one process, and
  // Adam's first steps amplify the last bit: measured 4.6e-6 to 1.14e-5 on an Intel host, 2.12e-5
  // on an AMD EPYC (stage 0, N=4; AVX2 kernels); a wrong shard or a missed reduction is 1e-2 or more.
  const double tolerance = v.nomaster ? 0.0 /* bit for bit */ : v.bf16 ? 0.05 : v.cuda ? cuda_tolerance : f64 ? 1e-10 : 5e-5;
  std::map<std::string, at::Tensor> mine;
  for (const auto& [name, p] : opt.full_parameters()) mine[name] = p;
  if (mine.empty())  // the model's own tensors are the trained ones
    for (const auto& [name, p] : live_params) mine[name] = p.detach().cpu();
  // LoRA: the frozen base is bit for bit what it was (gathered unit by unit where partitioned).
  if (v.lora) {
    for (std::size_t i = 0; i < base_lists.size(); ++i) {
      opt.gather(i);
      for (const auto& [name, p] : base_lists[i])
        if (!check(at::equal(p.detach().cpu(), base_before.at(name)), ("base changed: " + name).c_str())) return 1;
      opt.release(i);
    }
  }
  std::map<std::string, at::Tensor> ema;
  for (const auto& [name, t] : opt.ema_state()) ema[name] = t;
  double worst = 0;
  std::string worst_name;
  if (v.nomaster) {
    // bf16 weights without masters against one process doing the same: the draws of the rounding
    // follow each element's place in its unit, not the shard, so the ranks round as the one
    // process does. The gradients must be the same bf16 values too, which holds only without unit
    // boundaries in the graph (nooverlap at stages 0-1): with them, autograd adds the bf16
    // contributions to a shared input (the time embedding feeds every resnet) in another order, and
    // Adam's first, sign-like steps turn last-bit differences into whole updates. Measured in bf16
    // steps of the reference's weights.
    for (const auto& [name, p] : ref_params) {
      const at::Tensor want = p.detach().to(at::kDouble), got = mine.at(name).to(at::kDouble);
      // A bf16 step at the larger of the two values (with a floor for weights near zero, whose steps
      // shrink with them: 1e-3 of the tensor's largest).
      const double floor = 1e-3 * want.abs().max().item<double>();
      const at::Tensor ulp = (at::maximum(want.abs(), got.abs()).clamp_min(floor) * std::ldexp(1.0, -7));
      const at::Tensor off = (got - want).abs() / ulp;
      const double steps = off.max().item<double>();
      if (steps > 5) {
        const auto k = off.argmax().item<std::int64_t>();
        std::printf("%s[%lld]: %.9g vs %.9g\n", name.c_str(), static_cast<long long>(k), got.reshape({-1})[k].item<double>(),
                    want.reshape({-1})[k].item<double>());
      }
      if (steps > worst) {
        worst = steps;
        worst_name = name;
      }
    }
    std::printf("nomaster: worst %.3g bf16 steps from one process\n", worst);
  } else if (v.bf16) {
    // bf16 computes every gradient with 8-bit mantissas and Adam's early steps are close to sign
    // descent, so single elements may move differently; the run as a whole must move the same
    // way as fp32: the cosine between the two updates (weights and EMA) over all parameters.
    Denoiser initial(v.denoiser);
    std::map<std::string, at::Tensor> w0;
    for (const auto& p : initial->named_parameters()) w0[p.key()] = p.value().detach().to(at::kDouble);
    auto cosine = [&](const std::map<std::string, at::Tensor>& a, const std::vector<std::pair<std::string, at::Tensor>>& b) {
      double dot = 0, na = 0, nb = 0;
      for (const auto& [name, t] : b) {
        const at::Tensor da = a.at(name).to(at::kDouble) - w0.at(name), db = t.detach().to(at::kDouble) - w0.at(name);
        dot += (da * db).sum().item<double>();
        na += da.pow(2).sum().item<double>();
        nb += db.pow(2).sum().item<double>();
      }
      return dot / std::sqrt(na * nb);
    };
    const double cw = cosine(mine, ref_params), ce = cosine(ema, ref_ema.tensors());
    std::printf("bf16 update cosine: weights %.4f, EMA %.4f\n", cw, ce);
    worst = 1 - std::min(cw, ce);
    worst_name = "1 - cosine of the updates";
  } else {
    for (const auto& [name, p] : ref_params) {
      const double scale = std::max(p.abs().max().item<double>(), 1e-12);
      const double rel = (mine.at(name) - p).abs().max().item<double>() / scale;
      if (rel > worst) {
        worst = rel;
        worst_name = name;
      }
    }
    // The EMA, kept per shard, gathers to the single-process EMA (float32 on the CPU).
    for (const auto& [name, t] : ref_ema.tensors()) {
      const double scale = std::max(t.abs().max().item<double>(), 1e-12);
      const double rel = (ema.at(name) - t).abs().max().item<double>() / scale;
      if (!check(rel <= std::max(1e-4, tolerance), ("EMA differs: " + name + " by " + std::to_string(rel)).c_str()))
        return 1;
    }
  }
  if ((v.adam8 || v.adafactor) && rank == 0) {
    // The lean state really is there (8-bit units' block absmax, Adafactor's statistics).
    std::size_t lean = 0;
    for (const auto& [name, t] : opt.shard_state())
      lean += name.find(v.adam8 ? "/exp_avg.absmax" : "/adafactor:") != std::string::npos;
    std::printf("lean state tensors %zu\n", lean);
    if (!check(lean > 0, "the optimizer keeps its lean state")) return 1;
  }
  const auto b = opt.model_state();
  const auto off = opt.offloaded();
  if (v.lora && stage == 3 && world > 1) {
    // The frozen base is partitioned: the device holds the blocks' half (io stays whole; a
    // quantized base's blocks are their codes and scales), and none of it with its shards in CPU
    // memory, where they are.
    std::int64_t io = 0;
    for (const auto& [name, t] : base_lists.front()) io += t.numel() * static_cast<std::int64_t>(t.element_size());
    const std::int64_t blocks = opt.frozen_bytes() - io;
    const std::int64_t whole = opt.frozen_bytes() + opt.numel() * static_cast<std::int64_t>(c10::elementSize(dtype));
    std::printf("frozen %lld (blocks %lld) on device %lld offloaded %lld\n", static_cast<long long>(opt.frozen_bytes()),
                static_cast<long long>(blocks), static_cast<long long>(b.parameters), static_cast<long long>(off.parameters));
    if (v.param == zero::ZeroOptions::Offload::none &&
        !check(b.parameters <= whole - blocks / 4, "the frozen base is partitioned on the device"))
      return 1;
    if (v.param == zero::ZeroOptions::Offload::cpu &&
        !check(off.parameters >= blocks / 4 && b.parameters <= whole - blocks / 4, "the frozen base's shards are in CPU memory"))
      return 1;
  }
  std::printf("offloaded %lld %lld %lld %lld\n", static_cast<long long>(off.parameters),
              static_cast<long long>(off.gradients), static_cast<long long>(off.optimizer_states),
              static_cast<long long>(off.nvme_bytes));
  std::printf("ema_bytes %lld\n", static_cast<long long>(opt.ema_bytes()));
  std::printf("whole_grads %lld\n", static_cast<long long>(opt.whole_gradient_numel()));
  std::printf("state %lld %lld %lld psi %lld padded %lld units %zu persistent %lld worst %.3g %s\n",
              static_cast<long long>(b.parameters), static_cast<long long>(b.gradients),
              static_cast<long long>(b.optimizer_states), static_cast<long long>(opt.numel()),
              static_cast<long long>(opt.padded_numel()), unet.units().size(),
              static_cast<long long>(opt.persistent_numel()), worst, worst_name.c_str());
  return check(worst <= tolerance, "weights differ from the single-process reference") ? 0 : 1;
}

/// One step of the reshard scenario: rank r trains on its slice of global batch `step` (12
/// samples, the same data whatever the world size), float64.
void reshard_step(comm::Communicator& c, models::UNet2DConditionModel& unet, zero::ZeroOptimizer& opt, int step) {
  const std::int64_t G = 12, per_rank = G / c.world_size(), from = c.rank() * per_rank;
  at::Generator gen = at::detail::createCPUGenerator(500 + step);
  const at::Tensor x = at::randn({G, 3, 8, 8}, gen).to(at::kDouble), target = at::randn({G, 3, 8, 8}, gen).to(at::kDouble);
  const at::Tensor t = at::randint(0, 1000, {G}, gen, at::kLong), ctx = at::randn({G, 4, 16}, gen).to(at::kDouble);
  opt.zero_grad();
  opt.set_last_micro_step(true);
  const at::Tensor out = unet->forward(x.narrow(0, from, per_rank), t.narrow(0, from, per_rank), ctx.narrow(0, from, per_rank));
  (out - target.narrow(0, from, per_rank)).pow(2).mean().backward();
  opt.reduce_gradients();
  opt.clip_grad_norm(0.05);
  opt.step(1e-3);
  opt.update_ema();
}

/// Sharded checkpoints across layouts. "save": 3 steps at this stage and world size, each rank
/// writes its shard (rank 0 the index), then 3 more steps; rank 0 keeps the final weights,
/// moments and EMA as the reference. "load": another stage / world size / offload loads the
/// shards, takes the same 3 steps and must end where the reference did.
int reshard(comm::Communicator& c, const std::string& phase, int stage, const std::string& dir, const Variant& v) {
  auto unet = small_unet();
  unet->to(at::kDouble);
  zero::ZeroOptions o;
  o.persistence_threshold = 0;  // every unit sharded at stage 3 (zero.stage3_param_persistence_threshold: 0)
  o.stage = stage;
  o.weight_decay = 0.01;
  o.offload_optimizer = v.opt;
  o.offload_param = v.param;
  o.optimizer_nvme_path = o.param_nvme_path = v.nvme;
  o.delayed_update = v.delayed;  // saved after step 3, while step 3's update is pending
  o.delayed_update_warmup = 2;
  lean_options(v, o);
  // LoRA: the base as frozen units (partitioned at stage 3), the adapters one unit kept whole.
  std::vector<models::ParamUnit> units = unet->units();
  if (v.lora) {
    models::LoraOptions lo;
    lo.rank = 4;
    lo.alpha = 8;
    models::attach_lora(*unet, {"to_q", "to_k", "to_v", "to_out.0", "conv1"}, lo, 7, at::kDouble);
    for (auto& u : units) u.frozen = true;
    units.push_back(models::lora_unit(*unet, "lora_unet", ""));
    o.persistent_units.push_back("lora_unet");
  }
  std::vector<std::pair<std::string, at::Tensor>> live;  // the trained tensors, as the model holds them
  for (const auto& u : units)
    if (!u.frozen) live.insert(live.end(), u.parameters.begin(), u.parameters.end());
  zero::ZeroOptimizer opt(std::move(units), c, o);
  unet->set_unit_hooks(opt.unit_hooks());
  opt.enable_ema(0.8);
  auto whole = [&] {
    std::map<std::string, at::Tensor> out;
    for (const auto& [name, t] : opt.full_parameters()) out["w." + name] = t;
    if (out.empty())
      for (const auto& [name, t] : live) out["w." + name] = t.detach().clone();
    for (const auto& [name, t] : opt.state()) out["s." + name] = t;
    for (const auto& [name, t] : opt.ema_state()) out["e." + name] = t;
    return out;
  };
  if (phase == "save") {
    for (int step = 0; step < 3; ++step) reshard_step(c, unet, opt, step);
    const auto mine = opt.shard_state();
    if (!mine.empty()) io::write_safetensors(dir + "/" + checkpoint::shard_file_name(c.rank()), mine);
    if (c.rank() == 0) {
      const nlohmann::json meta = {{"step", 3}, {"sharding", checkpoint::sharding_json(opt.layout(), c.world_size(), stage)}};
      std::ofstream(dir + "/meta.json") << meta.dump(2);
    }
    c.barrier();
    for (int step = 3; step < 6; ++step) reshard_step(c, unet, opt, step);
    const auto ref = whole();
    if (c.rank() == 0) {
      zero::NamedTensors flat(ref.begin(), ref.end());
      io::write_safetensors(dir + "/reference.safetensors", flat);
    }
    return 0;
  }
  std::ifstream in(dir + "/meta.json");
  const nlohmann::json meta = nlohmann::json::parse(in);
  const checkpoint::ShardReader reader(dir, meta.at("sharding"));
  std::map<std::string, checkpoint::UnitLayout> layout;
  for (auto& u : opt.layout()) layout[u.name] = std::move(u);
  opt.load_shards([&](const std::string& unit, const std::string& kind, std::int64_t first, std::int64_t count) {
    return reader.read_state(layout.at(unit), kind, first, count, zero::kQuantBlock);
  }, meta.at("step").get<std::int64_t>(), reader.has("ema"), v.delayed && reader.has("lagged"));
  if (v.delayed && !check(opt.delayed_pending(), "the checkpoint kept the update pending")) return 1;
  for (int step = 3; step < 6; ++step) reshard_step(c, unet, opt, step);
  const auto mine = whole();
  const io::SafetensorsReader ref(dir + "/reference.safetensors");
  double worst = 0;
  std::string worst_name;
  for (const auto& e : ref.entries()) {
    const at::Tensor want = ref.tensor(e.name);
    if (!mine.count(e.name)) {
      std::fprintf(stderr, "missing %s\n", e.name.c_str());
      return 1;
    }
    const double scale = std::max(want.abs().max().item<double>(), 1e-30);
    const double rel = (mine.at(e.name).to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>() / scale;
    if (rel > worst) {
      worst = rel;
      worst_name = e.name;
    }
  }
  std::printf("reshard worst %.3g %s\n", worst, worst_name.c_str());
  return check(worst <= 1e-10, "the resharded continuation differs from the original one") ? 0 : 1;
}

/// Loss scaling across ranks: rank 1 alone sees an inf gradient; every rank must report the
/// overflow and skip (weights unchanged everywhere); the next, clean step updates everywhere.
int overflow_skips_everywhere(comm::Communicator& c, int stage) {
  auto unet = small_unet();
  zero::ZeroOptions o;
  o.persistence_threshold = 0;  // every unit sharded at stage 3 (zero.stage3_param_persistence_threshold: 0)
  o.stage = stage;
  zero::ZeroOptimizer opt(unet->units(), c, o);
  unet->set_unit_hooks(opt.unit_hooks());
  train::LossScaler scaler({0, 3, 1000, 1, 1});  // dynamic, starts at 8, no hysteresis
  auto snapshot = [&] {
    std::vector<at::Tensor> out;
    for (const auto& [name, p] : opt.full_parameters()) out.push_back(p.clone());
    if (out.empty())
      for (const auto& p : unet->parameters()) out.push_back(p.detach().clone());
    return out;
  };
  auto same = [](const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!at::equal(a[i], b[i])) return false;
    return true;
  };
  bool ok = true;
  for (int step = 0; step < 2; ++step) {
    const auto before = snapshot();
    opt.zero_grad();
    at::Generator gen = at::detail::createCPUGenerator(7 + c.rank());
    const at::Tensor x = at::randn({2, 3, 8, 8}, gen), ctx = at::randn({2, 4, 16}, gen);
    const at::Tensor out = unet->forward(x, at::full({2}, 10, at::kLong), ctx);
    (out.pow(2).mean() * scaler.scale()).backward();
    if (step == 0 && c.rank() == 1) {
      // After backward, before the reduction: this rank's gradient of some parameter is inf.
      c10::NoGradGuard no_grad;
      for (const auto& p : unet->parameters())
        if (p.grad().defined()) {
          p.grad().view({-1})[0] = std::numeric_limits<float>::infinity();
          break;
        }
    }
    opt.reduce_gradients();
    const bool overflow = opt.unscale_and_check_overflow(1.0 / scaler.scale());
    scaler.update(overflow);
    if (overflow) opt.skip_step();
    else opt.step(1e-2);
    const auto after = snapshot();
    if (step == 0) {
      ok &= check(overflow, "every rank sees the overflow of rank 1");
      ok &= check(same(before, after), "no rank stepped on the overflowed step");
      ok &= check(scaler.scale() == 4, "the scale halved");
    } else {
      ok &= check(!overflow, "the clean step is not an overflow");
      ok &= check(!same(before, after), "the clean step updated the weights");
    }
  }
  return ok ? 0 : 1;
}

/// The step time of ZeRO stage `stage` against stage 0, on two copies of one model, steps
/// alternated (a slow spell of the machine hits both alike), the median of 5 timed steps each
/// after 2 warm-up steps. Rank 0 prints "timing ratio R stage S_ms stage0 B_ms".
/// Step time of `stage` against stage 0 in the same processes, alternated. `lora`: "" (full
/// training both), "lora" (LoRA both: the frozen base gathered at stage 3 against stage 0), or
/// "lora-vs-full" (LoRA at `stage` against full training at stage 0).
int stage_timing(comm::Communicator& c, int stage, const std::string& lora) {
  keep_freed_memory();  // as the trainer does
  at::set_num_threads(1);
  auto build = [] { return two_level_unet(5, 4, {64, 128}, 2, 64, {4, 4}, 16); };
  struct Side {
    models::UNet2DConditionModel unet{nullptr};
    std::unique_ptr<zero::ZeroOptimizer> opt;
    std::vector<double> ms;
  };
  Side sides[2];
  for (int i = 0; i < 2; ++i) {
    sides[i].unet = build();
    zero::ZeroOptions o;
    o.persistence_threshold = 0;  // every unit sharded at stage 3 (zero.stage3_param_persistence_threshold: 0)
    o.stage = i == 0 ? 0 : stage;
    o.reduce_bucket_size = 5'000'000;
    std::vector<models::ParamUnit> units = sides[i].unet->units();
    if (lora == "lora" || (lora == "lora-vs-full" && i == 1)) {
      models::LoraOptions lo;
      lo.rank = 8;
      models::attach_lora(*sides[i].unet, models::sd_family().default_lora_targets(), lo, 3);
      for (auto& u : units) u.frozen = true;
      units.push_back(models::lora_unit(*sides[i].unet, "lora_unet", ""));
      o.persistent_units.push_back("lora_unet");
    }
    sides[i].opt = std::make_unique<zero::ZeroOptimizer>(std::move(units), c, o);
    sides[i].unet->set_unit_hooks(sides[i].opt->unit_hooks());
  }
  at::Generator gen = at::detail::createCPUGenerator(31 + c.rank());
  const at::Tensor x = at::randn({4, 4, 16, 16}, gen), ctx = at::randn({4, 8, 64}, gen);
  const at::Tensor t = at::randint(0, 1000, {4}, gen, at::kLong);
  for (int step = 0; step < 7; ++step)
    for (auto& side : sides) {
      const auto t0 = std::chrono::steady_clock::now();
      side.opt->zero_grad();
      (side.unet->forward(x, t, ctx) - x).pow(2).mean().backward();
      side.opt->reduce_gradients();
      side.opt->step(1e-4);
      if (step >= 2)
        side.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double zero = median(sides[0].ms), other = median(sides[1].ms);
  if (c.rank() == 0)
    std::printf("timing ratio %.3f stage%d%s %.1f stage0%s %.1f\n", other / zero, stage, lora.empty() ? "" : " lora", other,
                lora == "lora" ? " lora" : "", zero);
  return 0;
}

/// A long phase (Communicator::long_phase) on every rank: `how` is "slow" (rank 0 works for 3× the
/// timeout; the others must wait for it), "dies" (rank 1 is killed in the middle of its work) or
/// "throws" (rank 2's work fails). Then one collective, which must work after a good phase.
/// Prints the error and returns 3 when the phase fails here.
int long_phase(comm::Communicator& c, const std::string& how, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c.long_phase("the test phase", [&] {
      if (how == "slow" && c.rank() == 0) std::this_thread::sleep_for(std::chrono::duration<double>(3 * timeout_s));
      if (how == "dies" && c.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        std::raise(SIGKILL);
      }
      if (how == "throws" && c.rank() == 2) throw Error(ErrorKind::data, "rank 2's own problem");
    });
  } catch (const Error& e) {
    std::printf("%s\nwaited %.1f s\n", e.what(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    std::fflush(stdout);
    return 3;
  }
  at::Tensor t = at::ones({1});
  c.all_reduce(t);
  return check(t.item<float>() == c.world_size(), "all_reduce after the phase") ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "collectives";
  const double timeout_s = argc > 2 ? std::stod(argv[2]) : 20;
  try {
    const auto info = comm::rendezvous_from_env();
    if (!info) {
      std::fprintf(stderr, "RANK/WORLD_SIZE not set\n");
      return 2;
    }
    // The ZeRO and collectives scenarios take their Variant after the scenario's own arguments.
    const int variant_arg = scenario == "zero" ? 6 : scenario == "collectives" ? 3 : argc;
    const Variant variant(argc > variant_arg ? argv[variant_arg] : "");
    if (variant.cuda) {
      // float32 on the GPU must be float32 (TF32 would round products to 10-bit mantissas).
      at::globalContext().setAllowTF32CuDNN(false);
      at::globalContext().setAllowTF32CuBLAS(false);
    }
    auto comm = comm::Communicator::connect(*info, std::chrono::milliseconds(static_cast<long>(timeout_s * 1000)),
                                            variant.nccl, /*always_group=*/variant.nccl);
    int rc = 0;
    if (scenario == "collectives") {
      rc = collectives(*comm, variant.cuda ? at::Device(at::kCUDA, 0) : at::Device(at::kCPU));
    } else if (scenario == "zero") {
      std::vector<std::string> nvme_dirs;
      rc = zero_exactness(*comm, std::stoi(argv[3]), std::stoi(argv[4]), std::stod(argv[5]), variant, nvme_dirs);
      // The optimizer is gone: so are its NVMe folders.
      for (const auto& d : nvme_dirs)
        if (!check(count_files(d) == -1, ("NVMe folder left behind: " + d).c_str())) rc = 1;
    } else if (scenario == "reshard") {
      rc = reshard(*comm, argv[3], std::stoi(argv[4]), argv[5], Variant(argc > 6 ? argv[6] : ""));
    } else if (scenario == "long_phase") {
      rc = long_phase(*comm, argv[3], std::stod(argv[2]));
    } else if (scenario == "timing") {
      rc = stage_timing(*comm, std::stoi(argv[3]), argc > 4 ? argv[4] : "");
    } else if (scenario == "overflow") {
      rc = overflow_skips_everywhere(*comm, std::stoi(argv[3]));
    } else if (scenario == "die" || scenario == "stall" || scenario == "die0" || scenario == "die_inside") {
      at::Tensor t = at::ones({1});
      // die_inside: a collective long enough (200 MB) that rank 1 dies in the middle of it,
      // allocated before everyone is known to be up.
      at::Tensor big = scenario == "die_inside" ? at::ones({50'000'000}) : at::Tensor();
      comm->all_reduce(t);  // everyone is up
      if (scenario == "die0" && comm->rank() == 0) std::raise(SIGKILL);
      if (scenario == "die_inside") t = big;
      if (scenario == "die_inside" && comm->rank() == 1) {
        auto started = comm->all_reduce_async(t);  // counted as reached, never finished
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::raise(SIGKILL);
      }
      if (comm->rank() == 1 && scenario != "die0") {
        if (scenario == "die") std::raise(SIGKILL);
        std::this_thread::sleep_for(std::chrono::hours(1));
      }
      const auto t0 = std::chrono::steady_clock::now();
      try {
        comm->all_reduce(t);
      } catch (const Error& e) {
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%s\nwaited %.1f s\n", e.what(), waited);
        std::fflush(stdout);
        return 3;
      }
      std::printf("the collective did not fail\n");
      return 1;
    }
    if (rc == 0) std::printf("ok %s rank %d of %d (%s, native reduce_scatter %d)\n", scenario.c_str(), comm->rank(),
                             comm->world_size(), comm->backend().c_str(), comm->native_reduce_scatter());
    std::fflush(stdout);
    return rc;
  } catch (const Error& e) {
    std::printf("%s\n", e.what());
    std::fflush(stdout);
    return 3;
  }
}
