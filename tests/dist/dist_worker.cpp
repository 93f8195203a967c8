// Helper process for tst_dist: joins the world described by torchrun's environment variables
// and runs one scenario. Prints "ok" and exits 0 on success; prints the error and exits 3 on a
// zs::Error (so the test can read the message), 1 on a wrong result.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include <c10/core/GradMode.h>

#include "core/error.h"
#include "dist/communicator.h"
#include "models/unet_2d_condition.h"
#include "train/ema.h"
#include "train/optimizer.h"
#include "zero/zero_optimizer.h"

using namespace zs;

namespace {

bool check(bool ok, const char* what) {
  if (!ok) std::fprintf(stderr, "wrong result: %s\n", what);
  return ok;
}

int collectives(dist::Communicator& c) {
  const int r = c.rank(), n = c.world_size();
  bool ok = true;
  at::Tensor t = at::full({5}, r + 1.0);
  c.all_reduce(t);
  ok &= check(at::allclose(t, at::full({5}, n * (n + 1) / 2.0)), "all_reduce");
  // all_gather: shard of 3 values [r, r, r] -> flat [0,0,0,1,1,1,...]
  at::Tensor flat = at::zeros({3 * n});
  c.all_gather(at::full({3}, static_cast<double>(r)), flat);
  ok &= check(at::equal(flat, at::arange(n, at::kFloat).repeat_interleave(3)), "all_gather");
  // reduce_scatter: each rank contributes arange(2n) * (r + 1); chunk r summed.
  at::Tensor shard = at::zeros({2});
  c.reduce_scatter(at::arange(2 * n, at::kFloat) * (r + 1), shard);
  ok &= check(at::allclose(shard, at::arange(2 * r, 2 * r + 2, at::kFloat) * (n * (n + 1) / 2.0)), "reduce_scatter");
  at::Tensor b = at::full({4}, static_cast<double>(r * 10));
  c.broadcast(b, n - 1);
  ok &= check(at::equal(b, at::full({4}, (n - 1) * 10.0)), "broadcast");
  c.barrier();
  return ok ? 0 : 1;
}

models::UNet2DConditionModel small_unet() {
  at::manual_seed(11);
  models::UNetConfig c;
  c.in_channels = 3;
  c.out_channels = 3;
  c.block_out_channels = {16, 32};
  c.down_block_types = {"CrossAttnDownBlock2D", "DownBlock2D"};
  c.up_block_types = {"UpBlock2D", "CrossAttnUpBlock2D"};
  c.layers_per_block = 1;
  c.cross_attention_dim = 16;
  c.num_attention_heads = {2, 4};
  c.transformer_layers_per_block = {1, 1};
  c.norm_num_groups = 8;
  return models::UNet2DConditionModel(c);
}

/// Variations of the ZeRO run, from a comma-separated list: f64 (float64 instead of float32),
/// ckpt (activation checkpointing on the sharded model only).
struct Variant {
  bool f64 = false, ckpt = false;
  explicit Variant(const std::string& list) {
    std::stringstream ss(list);
    for (std::string f; std::getline(ss, f, ',');) {
      if (f == "f64") f64 = true;
      else if (f == "ckpt") ckpt = true;
      else if (!f.empty() && f != "f32") throw Error(ErrorKind::config, "dist_worker: unknown variant " + f);
    }
  }
};

/// 5 AdamW steps under ZeRO `stage` against one process training the whole batch; prints the
/// model-state bytes for the memory test.
int zero_exactness(dist::Communicator& c, int stage, int accum, double clip, const Variant& v) {
  const bool f64 = v.f64;
  const int rank = c.rank(), world = c.world_size();
  auto unet = small_unet();
  auto ref = small_unet();  // same seed, same initial weights
  const auto dtype = f64 ? at::kDouble : at::kFloat;
  unet->to(dtype);
  ref->to(dtype);
  zero::ZeroOptions o;
  o.stage = stage;
  o.weight_decay = 0.01;
  // Adam's first steps are close to sign descent, so last-bit differences in a gradient element
  // near zero (kernels on differently aligned buffers, another summation order) can move it by a
  // noticeable part of lr: float32 agrees to ~1e-5; float64 shows the sharding itself is exact.
  o.eps = 1e-8;
  o.reduce_bucket_size = 3000;  // several buckets on this small model
  o.allgather_bucket_size = 20000;
  zero::ZeroOptimizer opt(unet->units(), c, o);
  unet->set_unit_hooks(opt.unit_hooks());  // stage 3 gathers there; every stage overlaps its reduction
  unet->set_gradient_checkpointing(v.ckpt);  // stage 3 must gather a unit again for its rerun
  if (stage == 3 && !check(opt.sharded_units() + 1 == unet->units().size(), "every unit but io is sharded")) return 1;
  std::vector<std::pair<std::string, at::Tensor>> ref_params;
  for (const auto& p : ref->named_parameters()) ref_params.emplace_back(p.key(), p.value());
  train::AdamW ref_opt(ref_params, 0.9, 0.999, 1e-8, 0.01);
  opt.enable_ema(0.8);
  train::Ema ref_ema(ref_params, 0.8);
  const std::int64_t G = 12, per_rank = G / world, micro = per_rank / accum;
  for (int step = 0; step < 5; ++step) {
    at::Generator gen = at::detail::createCPUGenerator(100 + step);
    const at::Tensor x = at::randn({G, 3, 8, 8}, gen).to(dtype), target = at::randn({G, 3, 8, 8}, gen).to(dtype);
    const at::Tensor t = at::randint(0, 1000, {G}, gen, at::kLong), ctx = at::randn({G, 4, 16}, gen).to(dtype);
    opt.zero_grad();
    for (int k = 0; k < accum; ++k) {
      opt.set_last_micro_step(k == accum - 1);
      const std::int64_t from = rank * per_rank + k * micro;
      const at::Tensor out = unet->forward(x.narrow(0, from, micro), t.narrow(0, from, micro), ctx.narrow(0, from, micro));
      ((out - target.narrow(0, from, micro)).pow(2).mean() / accum).backward();
    }
    opt.reduce_gradients();
    const double norm = opt.clip_grad_norm(clip);
    opt.step(1e-3);
    // The reference: one process, the same samples in the same micro-batches (as gradient
    // accumulation would run them), gradients summed and divided by the number of ranks.
    // Each rank's gradient is accumulated on its own, then the ranks' sums are added in rank order.
    std::vector<at::Tensor> total(ref_params.size());
    for (int r = 0; r < world; ++r) {
      ref_opt.zero_grad();
      for (int k = 0; k < accum; ++k) {
        const std::int64_t from = r * per_rank + k * micro;
        const at::Tensor out = ref->forward(x.narrow(0, from, micro), t.narrow(0, from, micro), ctx.narrow(0, from, micro));
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
    const double ref_norm = ref_opt.clip_grad_norm(clip);
    ref_opt.step(1e-3);
    opt.update_ema();
    ref_ema.update(ref_params);
    if (std::abs(norm - ref_norm) > 1e-5 * ref_norm) {
      std::fprintf(stderr, "grad norm %g vs reference %g at step %d\n", norm, ref_norm, step);
      return 1;
    }
  }
  double worst = 0;
  std::string worst_name;
  std::map<std::string, at::Tensor> mine;
  for (const auto& [name, p] : opt.full_parameters()) mine[name] = p;
  if (mine.empty())
    for (const auto& p : unet->named_parameters()) mine[p.key()] = p.value();
  for (const auto& [name, p] : ref_params) {
    const double scale = std::max(p.abs().max().item<double>(), 1e-12);
    const double rel = (mine.at(name) - p).abs().max().item<double>() / scale;
    if (rel > worst) {
      worst = rel;
      worst_name = name;
    }
  }
  // The EMA, kept per shard, gathers to the single-process EMA (float32 on the CPU).
  std::map<std::string, at::Tensor> ema;
  for (const auto& [name, t] : opt.ema_state()) ema[name] = t;
  for (const auto& [name, t] : ref_ema.tensors()) {
    const double scale = std::max(t.abs().max().item<double>(), 1e-12);
    const double rel = (ema.at(name) - t).abs().max().item<double>() / scale;
    if (!check(rel <= 1e-4, ("EMA differs: " + name).c_str())) return 1;
  }
  const auto b = opt.model_state();
  std::printf("ema_bytes %lld\n", static_cast<long long>(opt.ema_bytes()));
  std::printf("state %lld %lld %lld psi %lld padded %lld units %zu persistent %lld worst %.3g %s\n",
              static_cast<long long>(b.parameters), static_cast<long long>(b.gradients),
              static_cast<long long>(b.optimizer_states), static_cast<long long>(opt.numel()),
              static_cast<long long>(opt.padded_numel()), unet->units().size(),
              static_cast<long long>(opt.persistent_numel()), worst, worst_name.c_str());
  return check(worst <= (f64 ? 1e-10 : 2e-5), "weights differ from the single-process reference") ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "collectives";
  const double timeout_s = argc > 2 ? std::stod(argv[2]) : 20;
  try {
    const auto info = dist::rendezvous_from_env();
    if (!info) {
      std::fprintf(stderr, "RANK/WORLD_SIZE not set\n");
      return 2;
    }
    auto comm = dist::Communicator::connect(*info, std::chrono::milliseconds(static_cast<long>(timeout_s * 1000)));
    int rc = 0;
    if (scenario == "collectives") {
      rc = collectives(*comm);
    } else if (scenario == "zero") {
      rc = zero_exactness(*comm, std::stoi(argv[3]), std::stoi(argv[4]), std::stod(argv[5]),
                          Variant(argc > 6 ? argv[6] : ""));
    } else if (scenario == "die" || scenario == "stall" || scenario == "die0") {
      at::Tensor t = at::ones({1});
      comm->all_reduce(t);  // everyone is up
      if (scenario == "die0" && comm->rank() == 0) std::raise(SIGKILL);
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
