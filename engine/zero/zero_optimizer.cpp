#include "zero/zero_optimizer.h"

#include <algorithm>
#include <deque>
#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/copy_stream.h"
#include "core/error.h"
#include "comm/communicator.h"
#include "zero/adamw8bit_unit.h"
#include "zero/blockwise_quant.h"
#include "zero/zero_schedules.h"

namespace zs::zero {

// Where each parameter sits in the unit's flat buffer (shapes from the placeholders' record
// when the unit was built into shards). A unit with raw parameters (a quantized base) is laid out
// in bytes, each parameter 16-byte aligned so that its bytes view as its dtype.
void ZeroOptimizer::lay_out(Unit& u, const models::ParamUnit& pu) const {
  const bool prebuilt = pu.shard.defined();
  const bool bytes = pu.has_raw();
  const at::ScalarType compute = compute_opts_.dtype().toScalarType();
  u.flat_opts = bytes ? compute_opts_.dtype(at::kByte) : compute_opts_;
  for (std::size_t i = 0; i < pu.parameters.size(); ++i) {
    const auto shape = prebuilt ? pu.shapes.at(i) : pu.parameters[i].second.sizes().vec();
    std::int64_t n = c10::multiply_integers(shape);
    if (bytes) {
      const at::ScalarType dtype = i < pu.raw.size() && pu.raw[i] ? pu.parameters[i].second.scalar_type() : compute;
      u.dtypes.push_back(dtype);
      n *= static_cast<std::int64_t>(c10::elementSize(dtype));
      u.numel = (u.numel + 15) / 16 * 16;
    }
    u.offsets.push_back(u.numel);
    u.sizes.push_back(n);
    u.shapes.push_back(shape);
    u.numel += n;
  }
}

at::Tensor ZeroOptimizer::param_view(const Unit& u, const at::Tensor& flat, std::size_t i) {
  at::Tensor slot = flat.narrow(0, u.offsets[i], u.sizes[i]);
  if (!u.dtypes.empty()) slot = slot.view(u.dtypes[i]);
  return slot.view(u.shapes[i]);
}

RuleSettings ZeroOptions::rule_settings() const {
  RuleSettings s;
  s.optimizer = optimizer;
  s.compute = compute_dtype == at::kBFloat16 ? Precision::bf16 : compute_dtype == at::kHalf ? Precision::fp16 : Precision::full;
  s.master_weights = master_weights;
  s.fused_backward = fused_backward;
  s.delayed_update = delayed_update;
  s.host_bf16_grads = host_bf16_grads;
  s.offload_optimizer = offload_optimizer;
  return s;
}

std::vector<std::string> ZeroOptions::problems() const {
  std::vector<std::string> out;
  for (const OptionProblem& p : option_problems(rule_settings())) out.push_back(p.key + ": " + p.message);
  return out;
}

PlanOptions plan_options(const ZeroOptions& o, int world_size, int rank) {
  PlanOptions p;
  // 8-bit moments are quantized in blocks counted from each unit's start: shards cut on block
  // boundaries keep every block on one rank, whatever the world size.
  p.shard_multiple = shard_multiple(o.optimizer);
  p.fused_backward = o.fused_backward;
  p.stage = o.stage;
  p.world_size = world_size;
  p.rank = rank;
  p.offload_optimizer = o.offload_optimizer;
  p.offload_param = o.offload_param;
  p.persistence_threshold = o.persistence_threshold;
  p.persistent_units = o.persistent_units;
  p.overlap_comm = o.overlap_comm;
  return p;
}

ZeroOptimizer::ZeroOptimizer(std::vector<models::ParamUnit> units, comm::Communicator& comm, ZeroOptions options)
    : comm_(comm), o_(std::move(options)), adam_{o_.beta1, o_.beta2, o_.eps, o_.weight_decay} {
  // The layout and treatment of every unit: the plan (zero_plan.h), from the units' sizes; the
  // frozen units get theirs from the same rules, apart (plan() describes what is trained).
  // (a quantized frozen unit's size is in bytes: the laid-out size, which needs the compute dtype)
  c10::NoGradGuard no_grad;
  choose_precisions(units);
  std::vector<std::pair<std::string, std::int64_t>> sizes, frozen_sizes;
  for (const auto& pu : units) {
    if (pu.has_raw() && !pu.frozen) throw Error(ErrorKind::config, "unit " + pu.name + ": only a frozen unit may hold quantized weights");
    if (pu.has_raw() && pu.shard.defined())
      throw Error(ErrorKind::config, "unit " + pu.name + ": a quantized base cannot be built into shards yet "
                                     "(zero.zero3_init_flag with model.base_precision)");
    Unit layout;
    lay_out(layout, pu);
    (pu.frozen ? frozen_sizes : sizes).emplace_back(pu.name, layout.numel);
  }
  plan_ = make_plan(plan_options(o_, comm_.world_size(), comm_.rank()), sizes);
  const Plan frozen_plan = make_plan(plan_options(o_, comm_.world_size(), comm_.rank()), frozen_sizes);
  std::size_t trained = 0, frozen = 0;
  for (auto& pu : units) {
    if (pu.frozen) {
      frozen_.push_back(make_frozen_unit(pu, frozen_plan.units[frozen++]));
      by_index_.push_back(frozen_.back().get());
      continue;
    }
    units_.push_back(make_trained_unit(pu, plan_.units[trained++]));
    by_index_.push_back(units_.back().get());
    release(*units_.back());  // stage 3: the gathered copy goes now, not after the whole model
  }
  place_offloaded_state();
  init_offload();  // NVMe files (moves the shards and the initial optimizer state there)
  for (Unit* u : by_index_) release(*u);
  ensure_grads();
  schedule_ = make_schedule();
}

void ZeroOptimizer::choose_precisions(const std::vector<models::ParamUnit>& units) {
  // The parameters arrive in their training precision (fp32, or fp64 in tests); the model
  // computes in compute_dtype; separate masters exist when those differ or when offloading.
  at::TensorOptions given = at::TensorOptions().dtype(at::kFloat);
  for (const auto& pu : units)
    if (!pu.parameters.empty() && !pu.frozen) {
      given = pu.parameters.front().second.options();
      break;
    }
  if (o_.device) given = given.device(*o_.device);
  given_opts_ = given;
  const at::ScalarType given_type = given.dtype().toScalarType();
  master_dtype_ = given_type == at::kHalf || given_type == at::kBFloat16 ? at::kFloat : given_type;
  const at::ScalarType compute = o_.compute_dtype.value_or(given.dtype().toScalarType());
  {
    // The options' problems with the precision resolved (unset: the parameters' own).
    ZeroOptions resolved = o_;
    resolved.compute_dtype = compute;
    const RuleSettings rules = resolved.rule_settings();
    std::string why;
    for (const std::string& p : resolved.problems()) why += (why.empty() ? "" : "; ") + p;
    if (!why.empty()) throw Error(ErrorKind::config, why);
    masters_ = keeps_master_weights(o_.master_weights, compute != master_dtype_, o_.offload_optimizer);
    stochastic_ = !o_.master_weights && compute == at::kBFloat16;
    hold_bf16_grads_ = holds_bf16_grads(rules);
  }
  compute_opts_ = given.dtype(compute);
  copies_ = std::make_unique<CopyStream>(o_.side_streams ? compute_opts_.device() : at::Device(at::kCPU));
  // Offloaded state lives in CPU memory, named explicitly: Tensor::to() with options that name no
  // device keeps the tensor where it is (on the GPU).
  state_opts_ = o_.offload_optimizer != ZeroOptions::Offload::none
                    ? at::TensorOptions().dtype(master_dtype_).device(at::kCPU)
                    : given.dtype(master_dtype_);
}

std::unique_ptr<ZeroOptimizer::Unit> ZeroOptimizer::make_trained_unit(models::ParamUnit& pu, const UnitPlan& up) {
  // Where and in what the optimizer state lives (float32 without masters under bf16 too).
  const at::TensorOptions moment_opts = state_opts_;
  // AdamW on NVMe streams its state in sub-groups (init_offload writes it); the lean optimizers'
  // state is made here as in memory and moved to files whole, a unit at a time.
  const bool nvme_optimizer = o_.offload_optimizer == ZeroOptions::Offload::nvme && o_.optimizer == OptimizerType::adamw;
  auto u = std::make_unique<Unit>();
  u->name = pu.name;
  u->lr_scale = pu.lr_scale;
  const bool prebuilt = pu.shard.defined();  // zero3_init_flag: only this rank's shard exists
  lay_out(*u, pu);
  u->plan = up;
  if (prebuilt && (!u->plan.sharded || pu.shard.numel() != u->plan.shard))
    throw Error(ErrorKind::config, "unit " + u->name + " was built into shards (zero.zero3_init_flag) but is not sharded "
                                   "here (zero.stage " + std::to_string(o_.stage) + ")");
  at::Tensor mine;  // the owned weights at full precision
  if (prebuilt) {
    mine = pu.shard.to(given_opts_.dtype(master_dtype_));
    u->shard_param = mine.to(compute_opts_.dtype());
    for (const auto& param : pu.parameters) u->params.push_back(param);
  } else {
    at::Tensor full = at::zeros({u->plan.padded}, given_opts_.dtype(master_dtype_));  // the weights at full precision
    for (std::size_t i = 0; i < pu.parameters.size(); ++i)
      full.narrow(0, u->offsets[i], u->sizes[i]).copy_(pu.parameters[i].second.detach().reshape({-1}));
    u->flat_param = full.to(compute_opts_.dtype());
    for (std::size_t i = 0; i < pu.parameters.size(); ++i) {
      at::Tensor p = pu.parameters[i].second;
      p.set_data(u->flat_param.narrow(0, u->offsets[i], u->sizes[i]).view(u->shapes[i]));
      u->params.emplace_back(pu.parameters[i].first, p);
    }
    mine = full.narrow(0, u->plan.owned_offset, u->plan.owned);
    // Stage 3: the unit keeps only its shard from here (the rest of the model still arrives
    // whole; zero3_init_flag builds it into shards instead).
    if (u->plan.sharded) u->shard_param = u->flat_param.narrow(0, u->plan.owned_offset, u->plan.shard).clone();
  }
  if (masters_) {
    if (nvme_optimizer) nvme_state(*u).init_master = mine.to(at::kCPU).clone();
    else u->master = mine.to(state_opts_).clone();
  }
  if (o_.optimizer == OptimizerType::adafactor) {
    u->optimizer = std::make_unique<AdafactorUnit>(u->offsets, u->shapes, u->plan.owned_offset, u->plan.owned,
                                                   o_.adafactor, moment_opts);
  } else if (uses_8bit_state(o_.optimizer, u->numel)) {
    // bitsandbytes keeps tensors below min_8bit_size in 32 bits; here the rule holds per unit.
    if (!signed_map_.defined()) {
      signed_map_ = dynamic_map(true).to(moment_opts.device());
      unsigned_map_ = dynamic_map(false).to(moment_opts.device());
    }
    u->optimizer = std::make_unique<AdamW8bitUnit>(u->numel, u->plan.owned, adam_, moment_opts, signed_map_, unsigned_map_);
  } else {
    u->optimizer = std::make_unique<AdamWUnit>(u->plan.owned, adam_, moment_opts, nvme_optimizer);
  }
  // On the device the reduced gradients stay in the compute dtype (ZeRO's 2Ψ/N at stage 2-3; the
  // step upcasts one unit at a time); the offloaded copy is fp32, as DeepSpeed's.
  const bool offloaded = o_.offload_optimizer != ZeroOptions::Offload::none;
  shard_grad_opts_ = offloaded ? state_opts_ : compute_opts_;
  // fused_backward: a hooked unit's part exists only from its reduction to its step.
  u->grad_copy = up.reduced_copy;
  if (up.reduced_copy && !(o_.fused_backward && up.hook_grads) && !hold_bf16_grads_)
    u->shard_grad = at::zeros({u->plan.owned}, shard_grad_opts_);
  return u;
}

void ZeroOptimizer::place_offloaded_state() {
  const bool pin = o_.pin_memory && at::globalContext().hasCUDA();
  for (Unit* u : by_index_) {
    if (!u->plan.sharded) continue;
    if (o_.offload_param == ZeroOptions::Offload::cpu) {
      u->shard_param = u->shard_param.to(at::kCPU);
      if (pin) u->shard_param = u->shard_param.pin_memory();
    }
  }
  if (pin && o_.offload_optimizer == ZeroOptions::Offload::cpu)
    for (auto& u : units_) {
      for (at::Tensor* t : {&u->master, &u->shard_grad})
        if (t->defined()) *t = t->pin_memory();
      u->optimizer->pin();
    }
}

std::unique_ptr<ZeroOptimizer::Unit> ZeroOptimizer::make_frozen_unit(models::ParamUnit& pu, const UnitPlan& up) {
  auto u = std::make_unique<Unit>();
  u->name = pu.name;
  u->frozen = true;
  const bool prebuilt = pu.shard.defined();
  lay_out(*u, pu);
  // Its layout and sharding are the plan's; it owns its shard for the layout only and has no
  // gradients to reduce or weights to update.
  u->plan = up;
  u->plan.owned = up.shard;
  u->plan.owned_offset = comm_.rank() * up.shard;
  u->plan.hook_grads = u->plan.reduce_scatter = u->plan.partitioned_grads = false;
  u->plan.reduced_copy = u->plan.gather_after_step = false;
  if (prebuilt) {
    if (!u->plan.sharded || pu.shard.numel() != u->plan.shard)
      throw Error(ErrorKind::config, "frozen unit " + u->name + " was built into shards but is not sharded here");
    u->shard_param = pu.shard.to(compute_opts_);
    for (const auto& param : pu.parameters) u->params.push_back(param);
    return u;
  }
  // Straight into the compute dtype on the device (raw parameters: their own), one parameter at a
  // time: a frozen unit never needs its full precision again.
  u->flat_param = at::zeros({u->plan.padded}, u->flat_opts);
  for (std::size_t i = 0; i < pu.parameters.size(); ++i) {
    at::Tensor p = pu.parameters[i].second;
    at::Tensor slot = param_view(*u, u->flat_param, i);
    slot.copy_(p.detach());
    p.set_requires_grad(false);
    p.set_data(slot);
    u->params.emplace_back(pu.parameters[i].first, p);
  }
  if (u->plan.sharded) u->shard_param = u->flat_param.narrow(0, u->plan.owned_offset, u->plan.shard).clone();
  release(*u);
  return u;
}

bool ZeroOptimizer::is_sharded(std::size_t unit) const { return indexed(unit).plan.sharded; }

std::int64_t ZeroOptimizer::frozen_numel() const {
  std::int64_t n = 0;
  for (const auto& u : frozen_) {
    if (u->dtypes.empty()) {
      n += u->numel;
    } else {  // laid out in bytes: the elements of its tensors (a quantized weight's codes and scales)
      for (const auto& shape : u->shapes) n += c10::multiply_integers(shape);
    }
  }
  return n;
}

std::int64_t ZeroOptimizer::frozen_bytes() const {
  std::int64_t n = 0;
  for (const auto& u : frozen_) n += u->numel * static_cast<std::int64_t>(u->flat_opts.dtype().itemsize());
  return n;
}

std::size_t ZeroOptimizer::sharded_frozen_units() const {
  std::size_t n = 0;
  for (const auto& u : frozen_) n += u->plan.sharded;
  return n;
}

std::size_t ZeroOptimizer::sharded_units() const {
  std::size_t n = 0;
  for (const auto& u : units_) n += u->plan.sharded;
  return n;
}

void ZeroOptimizer::prefetch(std::size_t unit) {
  if (unit >= by_index_.size()) return;
  Unit& u = indexed(unit);
  if (!u.plan.sharded || u.flat_param.defined() || u.gathering || u.plan.padded > o_.prefetch_bucket_size) return;
  if (shard_is_unit(u)) return;  // nothing to fetch
  c10::NoGradGuard no_grad;
  if (u.nvme && u.nvme->region_param >= 0) {
    // NVMe: start reading the shard; the all-gather runs when the unit is needed.
    read_owned_params(u);
    return;
  }
  u.flat_param = at::empty({u.plan.padded}, u.flat_opts);
  if (copies_->asynchronous() && u.shard_param.device().is_cpu()) {
    // An offloaded shard goes up and is gathered on the side stream while this unit computes.
    at::Tensor src = u.shard_param, dst = at::empty({u.plan.shard}, u.flat_opts), flat = u.flat_param;
    u.gather_fence = copies_->run(
        [&] {
          dst.copy_(src, /*non_blocking=*/true);
          u.gathering = comm_.all_gather_async(dst, flat);
        },
        {dst, flat});
    u.gather_source = dst;
    return;
  }
  u.gather_source = u.shard_param.to(compute_opts_.device(), /*non_blocking=*/true);
  u.gathering = comm_.all_gather_async(u.gather_source, u.flat_param);
}

void ZeroOptimizer::gather(std::size_t unit) {
  Unit& u = indexed(unit);
  u.hooked = true;  // from now on its updated shards may be gathered while the forward goes on
  if (u.post_gather) {
    u.post_gather->wait();
    u.post_gather.reset();
  }
  if (!u.plan.sharded) return;
  c10::NoGradGuard no_grad;
  if (u.gathering) {
    u.gathering->wait();
    u.gathering.reset();
    copies_->wait_on_device(u.gather_fence);  // a side-stream prefetch (one rank: the gather itself)
    u.gather_fence = {};
    u.gather_source = at::Tensor();
  } else if (!u.flat_param.defined() && shard_is_unit(u)) {
    u.flat_param = u.shard_param;  // one rank, the shard on the device: it is the whole unit
  } else if (!u.flat_param.defined()) {
    // The shard from wherever it lives (device, CPU, or the NVMe file: a prefetched read).
    const at::Tensor source = owned_params(u).to(u.flat_opts.device());
    u.flat_param = at::empty({u.plan.padded}, u.flat_opts);
    comm_.all_gather(source, u.flat_param);
  } else if (!u.params.empty() && u.params[0].second.numel() == c10::multiply_integers(u.shapes[0])) {
    return;  // already gathered and in place
  }
  for (std::size_t i = 0; i < u.params.size(); ++i) u.params[i].second.set_data(param_view(u, u.flat_param, i));
}

bool ZeroOptimizer::shard_is_unit(const Unit& u) const {
  return comm_.world_size() == 1 && u.shard_param.defined() && u.shard_param.device() == u.flat_opts.device() &&
         u.shard_param.scalar_type() == u.flat_opts.dtype().toScalarType();
}

void ZeroOptimizer::release(std::size_t unit) { release(indexed(unit)); }

void ZeroOptimizer::release(Unit& u) {
  if (!u.plan.sharded) return;
  if (u.gathering) {  // never drop a buffer a collective is still writing
    u.gathering->wait();
    u.gathering.reset();
    copies_->wait_on_device(u.gather_fence);
    u.gather_fence = {};
    u.gather_source = at::Tensor();
  }
  for (std::size_t i = 0; i < u.params.size(); ++i)
    u.params[i].second.set_data(at::empty({0}, u.flat_opts.dtype(u.dtypes.empty() ? u.flat_opts.dtype().toScalarType() : u.dtypes[i])));
  u.flat_param = at::Tensor();
}

bool ZeroOptimizer::wants_backward_hook(std::size_t unit) const {
  const Unit& u = indexed(unit);
  if (u.frozen) return u.plan.sharded;  // nothing to reduce; the gathered copy goes after its backward
  // The io unit runs at both ends of the forward: it is reduced with the rest after backward.
  return u.plan.hook_grads ||
         (unit != 0 && last_micro_ && (o_.fused_backward || (plan_.overlap_comm && comm_.world_size() > 1)));
}

// Collectives still in flight (after a failure) keep their tensors alive through their work
// objects, so nothing waits for them here: after a peer died that could take a timeout per unit.
ZeroOptimizer::~ZeroOptimizer() {
  schedule_.reset();  // (a delayed update under way ends before the units go)
}

namespace {

/// Identity in forward; its backward acts on a unit. At the unit's output (kRegather) it runs
/// before the unit's own backward and gathers its parameters; at the unit's input (kReduce) it
/// runs after, and reduces the unit's gradients (stage 3: and releases its parameters).
struct UnitBoundary : public torch::autograd::Function<UnitBoundary> {
  enum Action : std::int64_t { kRegather = 0, kReduce = 1 };
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, std::int64_t owner,
                            std::int64_t unit, std::int64_t action) {
    ctx->saved_data["owner"] = owner;
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["action"] = action;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* self = reinterpret_cast<ZeroOptimizer*>(ctx->saved_data["owner"].toInt());
    const auto unit = static_cast<std::size_t>(ctx->saved_data["unit"].toInt());
    if (ctx->saved_data["action"].toInt() == kReduce) {
      self->reduce_unit(unit);
    } else {
      self->gather(unit);
      if (unit > 1) self->prefetch(unit - 1);  // backward runs the units in reverse
    }
    return {grads[0], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class ZeroHooks final : public models::UnitHooks {
 public:
  explicit ZeroHooks(ZeroOptimizer& owner) : owner_(owner) {}
  at::Tensor before(std::size_t unit, const at::Tensor& input) override {
    owner_.gather(unit);  // no-op unless the unit is sharded
    owner_.prefetch(unit + 1);  // forward runs the units in order
    if (!c10::GradMode::is_enabled() || !input.requires_grad() || !owner_.wants_backward_hook(unit)) return input;
    return UnitBoundary::apply(input, reinterpret_cast<std::int64_t>(&owner_), static_cast<std::int64_t>(unit),
                               std::int64_t{UnitBoundary::kReduce});
  }
  at::Tensor after(std::size_t unit, const at::Tensor& output) override {
    if (!owner_.is_sharded(unit)) return output;
    owner_.release(unit);
    if (!c10::GradMode::is_enabled() || !output.requires_grad()) return output;
    return UnitBoundary::apply(output, reinterpret_cast<std::int64_t>(&owner_), static_cast<std::int64_t>(unit),
                               std::int64_t{UnitBoundary::kRegather});
  }

 private:
  ZeroOptimizer& owner_;
};

}  // namespace

std::shared_ptr<models::UnitHooks> ZeroOptimizer::unit_hooks() { return std::make_shared<ZeroHooks>(*this); }

void ZeroOptimizer::gather_whole_units(bool defer) {
  // Every rank updated its shard of the units kept whole (stages 1-3 with several ranks): each
  // unit's shards are gathered straight into its flat buffer — the rank's own part is the
  // collective's input, in place. (A bucket concatenated into one buffer and copied back took
  // 1.7 s a step on the 54 M-parameter bench model at N = 2: three fresh copies of the model whose
  // pages fault in every time.) Units the forward reaches through a hook are gathered while the
  // next forward runs (`defer`: the hook waits for its unit); the others now, first, with at most
  // allgather_bucket_size elements in flight.
  c10::NoGradGuard no_grad;
  finish_gathers();
  std::deque<std::pair<std::int64_t, std::unique_ptr<comm::PendingCollective>>> flying;
  std::int64_t in_flight = 0;
  for (auto& u : units_) {
    if (!u->plan.gather_after_step || (defer && u->hooked)) continue;
    while (!flying.empty() && in_flight + u->plan.padded > o_.allgather_bucket_size) {
      flying.front().second->wait();
      in_flight -= flying.front().first;
      flying.pop_front();
    }
    flying.emplace_back(u->plan.padded, comm_.all_gather_async(u->flat_param.narrow(0, u->plan.owned_offset, u->plan.owned), u->flat_param));
    in_flight += u->plan.padded;
  }
  for (auto& [elements, pending] : flying) pending->wait();
  if (!defer) return;
  for (auto& u : units_)  // in forward order, as the hooks will wait for them
    if (u->plan.gather_after_step && u->hooked)
      u->post_gather = comm_.all_gather_async(u->flat_param.narrow(0, u->plan.owned_offset, u->plan.owned), u->flat_param);
}

void ZeroOptimizer::finish_gathers() {
  for (auto& u : units_)
    if (u->post_gather) {
      u->post_gather->wait();
      u->post_gather.reset();
    }
}

std::int64_t ZeroOptimizer::padded_numel() const {
  std::int64_t n = 0;
  for (const auto& u : units_) n += u->plan.padded;
  return n;
}

std::int64_t ZeroOptimizer::persistent_numel() const {
  std::int64_t n = 0;
  for (const auto& u : units_)
    if (!u->plan.sharded) n += u->plan.padded;
  return n;
}

std::int64_t ZeroOptimizer::whole_gradient_numel() const {
  std::int64_t n = 0;
  for (const auto& u : units_)
    if (!u->plan.hook_grads) n += u->plan.padded;
  return n;
}

std::int64_t ZeroOptimizer::numel() const {
  std::int64_t n = 0;
  for (const auto& u : units_) n += u->numel;
  return n;
}

}  // namespace zs::zero
