#include "zero/zero_optimizer.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/custom_function.h>

#include "core/error.h"
#include "dist/communicator.h"

namespace zs::zero {

struct ZeroOptimizer::Unit {
  std::string name;
  bool sharded = false;      // stage 3 and not persistent: only shard_param is kept
  std::vector<std::pair<std::string, at::Tensor>> params;  // views into flat_param
  std::vector<std::int64_t> offsets;
  std::vector<std::int64_t> sizes;                   // elements per parameter
  std::vector<std::vector<std::int64_t>> shapes;     // shapes (stage 3 empties the tensors)
  std::int64_t numel = 0;    // real elements
  std::int64_t padded = 0;   // multiple of world size
  std::int64_t shard = 0;    // padded / world
  at::Tensor flat_param;     // [padded] (stage 3 sharded units: only while gathered)
  at::Tensor shard_param;    // [shard] stage 3 sharded units: this rank's parameters
  at::Tensor flat_grad;      // [padded] full gradients (undefined between reduce and zero_grad at stage 2)
  at::Tensor shard_grad;     // [shard] stage 2: this rank's averaged gradient
  at::Tensor exp_avg, exp_avg_sq;  // [padded] at stage 0, [shard] at stages 1-2
  std::unique_ptr<dist::PendingCollective> pending;  // a gradient reduction under way
  at::Tensor part;                                    // its reduce-scatter output (stage 2/3)
  at::Tensor ema;                                     // CPU, float32: EMA of the owned slice
  std::unique_ptr<dist::PendingCollective> gathering; // stage 3: a prefetch under way into flat_param
};

namespace {

std::int64_t bytes(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<std::int64_t>(t.element_size()) : 0; }

}  // namespace

ZeroOptimizer::ZeroOptimizer(std::vector<models::ParamUnit> units, dist::Communicator& comm, ZeroOptions options)
    : comm_(comm), o_(options) {
  if (o_.stage < 0 || o_.stage > 3)
    throw Error(ErrorKind::config, "zero.stage " + std::to_string(o_.stage) + " does not exist (0-3)");
  const int world = comm_.world_size();
  c10::NoGradGuard no_grad;
  for (auto& pu : units) {
    auto u = std::make_unique<Unit>();
    u->name = pu.name;
    for (const auto& [name, p] : pu.parameters) {
      u->offsets.push_back(u->numel);
      u->sizes.push_back(p.numel());
      u->shapes.push_back(p.sizes().vec());
      u->numel += p.numel();
    }
    u->padded = (u->numel + world - 1) / world * world;
    u->shard = u->padded / world;
    // fp32 training: the flat buffer has the parameters' dtype (float64 in precision tests).
    const auto opts = pu.parameters.empty() ? at::TensorOptions().dtype(at::kFloat)
                                            : pu.parameters.front().second.options();
    u->flat_param = at::zeros({u->padded}, opts);
    for (std::size_t i = 0; i < pu.parameters.size(); ++i) {
      at::Tensor p = pu.parameters[i].second;
      at::Tensor view = u->flat_param.narrow(0, u->offsets[i], p.numel()).view(p.sizes());
      view.copy_(p.detach());
      p.set_data(view);
      u->params.emplace_back(pu.parameters[i].first, p);
    }
    const std::int64_t moments = o_.stage == 0 ? u->padded : u->shard;
    u->exp_avg = at::zeros({moments}, opts);
    u->exp_avg_sq = at::zeros({moments}, opts);
    const bool persistent = std::find(o_.persistent_units.begin(), o_.persistent_units.end(), u->name) !=
                                o_.persistent_units.end() || u->numel < o_.persistence_threshold;
    u->sharded = o_.stage == 3 && !persistent;
    units_.push_back(std::move(u));
  }
  for (std::size_t i = 0; i < units_.size(); ++i) {
    Unit& u = *units_[i];
    if (!u.sharded) continue;
    u.shard_param = u.flat_param.narrow(0, comm_.rank() * u.shard, u.shard).clone();
    u.shard_grad = at::zeros({u.shard}, u.shard_param.options());
    release(i);
  }
  ensure_grads();
}

bool ZeroOptimizer::is_sharded(std::size_t unit) const { return units_[unit]->sharded; }

std::size_t ZeroOptimizer::sharded_units() const {
  std::size_t n = 0;
  for (const auto& u : units_) n += u->sharded;
  return n;
}

void ZeroOptimizer::prefetch(std::size_t unit) {
  if (unit >= units_.size()) return;
  Unit& u = *units_[unit];
  if (!u.sharded || u.flat_param.defined() || u.padded > o_.prefetch_bucket_size) return;
  u.flat_param = at::empty({u.padded}, u.shard_param.options());
  u.gathering = comm_.all_gather_async(u.shard_param, u.flat_param);
}

void ZeroOptimizer::gather(std::size_t unit) {
  Unit& u = *units_[unit];
  if (!u.sharded) return;
  c10::NoGradGuard no_grad;
  if (u.gathering) {
    u.gathering->wait();
    u.gathering.reset();
  } else if (!u.flat_param.defined() || u.params.empty() || u.params[0].second.numel() != u.sizes[0]) {
    if (!u.flat_param.defined()) {
      u.flat_param = at::empty({u.padded}, u.shard_param.options());
      comm_.all_gather(u.shard_param, u.flat_param);
    }
  } else {
    return;  // already gathered and in place
  }
  for (std::size_t i = 0; i < u.params.size(); ++i) {
    at::Tensor& p = u.params[i].second;
    const auto& shape = u.shapes[i];
    p.set_data(u.flat_param.narrow(0, u.offsets[i], u.sizes[i]).view(shape));
  }
}

void ZeroOptimizer::release(std::size_t unit) {
  Unit& u = *units_[unit];
  if (!u.sharded) return;
  if (u.gathering) {  // never drop a buffer a collective is still writing
    u.gathering->wait();
    u.gathering.reset();
  }
  for (auto& [name, p] : u.params) p.set_data(at::empty({0}, u.shard_param.options()));
  u.flat_param = at::Tensor();
}

void ZeroOptimizer::reduce_scatter_into_shard(Unit& u, const at::Tensor& full_grad) {
  at::Tensor part = at::empty({u.shard}, full_grad.options());
  comm_.reduce_scatter(full_grad, part);
  u.shard_grad.add_(part, 1.0 / comm_.world_size());
}

bool ZeroOptimizer::wants_backward_hook(std::size_t unit) const {
  const Unit& u = *units_[unit];
  // The io unit runs at both ends of the forward: it is reduced with the rest after backward.
  return u.sharded || (unit != 0 && o_.overlap_comm && last_micro_ && comm_.world_size() > 1);
}

void ZeroOptimizer::launch_reduce(Unit& u) {
  if (u.pending || !u.flat_grad.defined()) return;
  if (o_.stage <= 1) {
    u.pending = comm_.all_reduce_async(u.flat_grad);
  } else {
    u.part = at::empty({u.shard}, u.flat_grad.options());
    u.pending = comm_.reduce_scatter_async(u.flat_grad, u.part);
  }
}

void ZeroOptimizer::finish_reduce(Unit& u) {
  if (!u.pending) return;
  u.pending->wait();
  u.pending.reset();
  if (o_.stage <= 1) {
    u.flat_grad.div_(comm_.world_size());
    return;
  }
  if (!u.shard_grad.defined()) u.shard_grad = at::zeros({u.shard}, u.flat_param.options());
  u.shard_grad.copy_(u.part).div_(comm_.world_size());
  u.part = at::Tensor();
  // Only the shard is kept: the full gradient buffer goes until the next backward.
  for (auto& [name, p] : u.params) p.mutable_grad() = at::Tensor();
  u.flat_grad = at::Tensor();
}

void ZeroOptimizer::reduce_unit(std::size_t unit) {
  Unit& u = *units_[unit];
  if (!u.sharded) {
    if (o_.overlap_comm && last_micro_ && comm_.world_size() > 1) launch_reduce(u);
    return;
  }
  c10::NoGradGuard no_grad;
  bool any = false;
  at::Tensor full = at::zeros({u.padded}, u.shard_param.options());
  for (std::size_t i = 0; i < u.params.size(); ++i) {
    at::Tensor& p = u.params[i].second;
    if (!p.grad().defined()) continue;
    full.narrow(0, u.offsets[i], u.sizes[i]).copy_(p.grad().reshape({-1}));
    p.mutable_grad() = at::Tensor();
    any = true;
  }
  if (any) reduce_scatter_into_shard(u, full);
  release(unit);
}

ZeroOptimizer::~ZeroOptimizer() = default;

void ZeroOptimizer::ensure_grads() {
  for (auto& u : units_) {
    if (u->sharded || u->flat_grad.defined()) continue;
    u->flat_grad = at::zeros({u->padded}, u->flat_param.options());
    for (std::size_t i = 0; i < u->params.size(); ++i) {
      at::Tensor& p = u->params[i].second;
      // Backward accumulates into these views in place, so gradients land in the flat buffer.
      p.mutable_grad() = u->flat_grad.narrow(0, u->offsets[i], p.numel()).view(p.sizes());
    }
  }
}

void ZeroOptimizer::zero_grad() {
  ensure_grads();
  for (auto& u : units_) {
    if (u->sharded) {
      u->shard_grad.zero_();
      for (auto& [name, p] : u->params) p.mutable_grad() = at::Tensor();
    } else {
      u->flat_grad.zero_();
    }
  }
  grads_reduced_ = false;
}

void ZeroOptimizer::reduce_gradients() {
  const int world = comm_.world_size();
  c10::NoGradGuard no_grad;
  bool launched = false;
  for (auto& u : units_) launched |= u->pending != nullptr;
  if (o_.stage <= 1 && !launched && world > 1) {
    // Nothing started during backward: all-reduce in buckets of about reduce_bucket_size elements.
    std::vector<Unit*> bucket;
    std::int64_t in_bucket = 0;
    auto flush = [&] {
      if (bucket.empty()) return;
      if (bucket.size() == 1) {
        comm_.all_reduce(bucket[0]->flat_grad);
      } else {
        std::vector<at::Tensor> parts;
        for (auto* u : bucket) parts.push_back(u->flat_grad);
        at::Tensor flat = at::cat(parts);
        comm_.all_reduce(flat);
        std::int64_t off = 0;
        for (auto* u : bucket) {
          u->flat_grad.copy_(flat.narrow(0, off, u->padded));
          off += u->padded;
        }
      }
      for (auto* u : bucket) u->flat_grad.div_(world);
      bucket.clear();
      in_bucket = 0;
    };
    for (auto& u : units_) {
      bucket.push_back(u.get());
      in_bucket += u->padded;
      if (in_bucket >= o_.reduce_bucket_size) flush();
    }
    flush();
    grads_reduced_ = true;
    return;
  }
  // Units whose backward hook already started their reduction are finished here; the rest
  // (io, text encoder, anything the hooks missed) are reduced now.
  for (std::size_t i = 0; i < units_.size(); ++i) {
    Unit& u = *units_[i];
    if (u.sharded) reduce_unit(i);  // normally done by its backward hook already
    else launch_reduce(u);
  }
  for (auto& u : units_)
    if (!u->sharded) finish_reduce(*u);
  grads_reduced_ = true;
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  c10::NoGradGuard no_grad;
  double sq = 0;
  if (o_.stage >= 2) {
    at::Tensor local = at::zeros({1}, at::kDouble);
    for (auto& u : units_) local += u->shard_grad.to(at::kDouble).pow(2).sum();
    comm_.all_reduce(local);
    sq = local.item<double>();
  } else {
    for (auto& u : units_) sq += u->flat_grad.to(at::kDouble).pow(2).sum().item<double>();
  }
  const double total = std::sqrt(sq);
  if (max_norm > 0 && total > max_norm) {
    const double scale = max_norm / (total + 1e-6);
    for (auto& u : units_) (o_.stage >= 2 ? u->shard_grad : u->flat_grad).mul_(scale);
  }
  return total;
}

void ZeroOptimizer::step(double lr) {
  if (!grads_reduced_) reduce_gradients();
  c10::NoGradGuard no_grad;
  ++step_;
  const double c1 = 1.0 - std::pow(o_.beta1, static_cast<double>(step_));
  const double c2 = 1.0 - std::pow(o_.beta2, static_cast<double>(step_));
  const double step_size = lr / c1, sqrt_c2 = std::sqrt(c2);
  const int rank = comm_.rank();
  for (auto& u : units_) {
    // The slice this rank updates: everything at stage 0, its shard otherwise.
    at::Tensor p = o_.stage == 0 ? u->flat_param
                   : u->sharded  ? u->shard_param
                                 : u->flat_param.narrow(0, rank * u->shard, u->shard);
    at::Tensor g = o_.stage == 0   ? u->flat_grad
                   : o_.stage == 1 ? u->flat_grad.narrow(0, rank * u->shard, u->shard)
                                   : u->shard_grad;
    // Same arithmetic, in the same order, as train::AdamW.
    if (o_.weight_decay > 0) p.mul_(1.0 - lr * o_.weight_decay);
    u->exp_avg.mul_(o_.beta1).add_(g, 1.0 - o_.beta1);
    u->exp_avg_sq.mul_(o_.beta2).addcmul_(g, g, 1.0 - o_.beta2);
    const at::Tensor denom = u->exp_avg_sq.sqrt().div_(sqrt_c2).add_(o_.eps);
    p.addcdiv_(u->exp_avg, denom, -step_size);
  }
  if (o_.stage > 0) gather_whole_units();
  if (o_.stage >= 2)
    for (auto& u : units_) u->shard_grad.zero_();
  grads_reduced_ = false;
}

train::NamedTensors ZeroOptimizer::state() const {
  train::NamedTensors out;
  for (const auto& u : units_) {
    at::Tensor m = u->exp_avg, v = u->exp_avg_sq;
    if (o_.stage > 0) {
      at::Tensor fm = at::zeros({u->padded}, m.options()), fv = at::zeros({u->padded}, v.options());
      comm_.all_gather(m.contiguous(), fm);
      comm_.all_gather(v.contiguous(), fv);
      m = fm;
      v = fv;
    }
    for (std::size_t i = 0; i < u->params.size(); ++i) {
      const std::string& name = u->params[i].first;
      out.emplace_back("exp_avg." + name, m.narrow(0, u->offsets[i], u->sizes[i]).view(u->shapes[i]).clone());
      out.emplace_back("exp_avg_sq." + name, v.narrow(0, u->offsets[i], u->sizes[i]).view(u->shapes[i]).clone());
    }
  }
  out.emplace_back("step", at::full({1}, step_, at::kLong));
  return out;
}

void ZeroOptimizer::load_state(const std::function<at::Tensor(const std::string&)>& get) {
  c10::NoGradGuard no_grad;
  const int rank = comm_.rank();
  for (auto& u : units_) {
    const auto opts = u->exp_avg.options();
    at::Tensor fm = at::zeros({u->padded}, opts), fv = at::zeros({u->padded}, opts);
    for (std::size_t i = 0; i < u->params.size(); ++i) {
      const std::string& name = u->params[i].first;
      const at::Tensor m = get("exp_avg." + name), v = get("exp_avg_sq." + name);
      if (m.numel() != u->sizes[i] || v.numel() != u->sizes[i])
        throw Error(ErrorKind::checkpoint, "optimizer state for " + name + " has the wrong shape");
      fm.narrow(0, u->offsets[i], u->sizes[i]).copy_(m.reshape({-1}));
      fv.narrow(0, u->offsets[i], u->sizes[i]).copy_(v.reshape({-1}));
    }
    if (o_.stage == 0) {
      u->exp_avg.copy_(fm);
      u->exp_avg_sq.copy_(fv);
    } else {
      u->exp_avg.copy_(fm.narrow(0, rank * u->shard, u->shard));
      u->exp_avg_sq.copy_(fv.narrow(0, rank * u->shard, u->shard));
    }
  }
  step_ = get("step").item<std::int64_t>();
}

train::ModelStateBytes ZeroOptimizer::model_state() const {
  train::ModelStateBytes b;
  for (const auto& u : units_) {
    const auto elem = static_cast<std::int64_t>(u->exp_avg.element_size());
    b.parameters += u->sharded ? bytes(u->shard_param) : bytes(u->flat_param);
    b.gradients += o_.stage >= 2 ? u->shard * elem : bytes(u->flat_grad);
    b.optimizer_states += bytes(u->exp_avg) + bytes(u->exp_avg_sq);
  }
  return b;
}

train::NamedTensors ZeroOptimizer::full_parameters() {
  if (o_.stage < 3) return {};
  c10::NoGradGuard no_grad;
  train::NamedTensors out;
  for (auto& u : units_) {
    at::Tensor flat = u->flat_param;
    if (u->sharded && !flat.defined()) {
      flat = at::empty({u->padded}, u->shard_param.options());
      comm_.all_gather(u->shard_param, flat);
    }
    for (std::size_t i = 0; i < u->params.size(); ++i)
      out.emplace_back(u->params[i].first, flat.narrow(0, u->offsets[i], u->sizes[i]).view(u->shapes[i]).clone());
  }
  return out;
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

at::Tensor ZeroOptimizer::owned_slice(Unit& u) const {
  if (o_.stage == 0) return u.flat_param;
  if (u.sharded) return u.shard_param;
  return u.flat_param.narrow(0, comm_.rank() * u.shard, u.shard);
}

bool ZeroOptimizer::enable_ema(double decay) {
  ema_decay_ = decay;
  for (auto& u : units_) u->ema = owned_slice(*u).detach().to(at::kCPU, at::kFloat, false, true);
  return true;
}

void ZeroOptimizer::update_ema() {
  if (ema_decay_ < 0) return;
  c10::NoGradGuard no_grad;
  for (auto& u : units_) u->ema.lerp_(owned_slice(*u).detach().to(at::kCPU, at::kFloat), 1.0 - ema_decay_);
}

train::NamedTensors ZeroOptimizer::ema_state() {
  train::NamedTensors out;
  if (ema_decay_ < 0) return out;
  for (auto& u : units_) {
    at::Tensor full = u->ema;
    if (o_.stage > 0) {
      full = at::zeros({u->padded}, u->ema.options());
      comm_.all_gather(u->ema, full);
    }
    for (std::size_t i = 0; i < u->params.size(); ++i)
      out.emplace_back(u->params[i].first, full.narrow(0, u->offsets[i], u->sizes[i]).view(u->shapes[i]).clone());
  }
  return out;
}

void ZeroOptimizer::load_ema(const std::function<at::Tensor(const std::string&)>& get) {
  if (ema_decay_ < 0) return;
  c10::NoGradGuard no_grad;
  for (auto& u : units_) {
    at::Tensor full = at::zeros({u->padded}, u->ema.options());
    for (std::size_t i = 0; i < u->params.size(); ++i) {
      const at::Tensor t = get(u->params[i].first);
      if (t.numel() != u->sizes[i]) throw Error(ErrorKind::checkpoint, "EMA tensor " + u->params[i].first + " has the wrong shape");
      full.narrow(0, u->offsets[i], u->sizes[i]).copy_(t.reshape({-1}));
    }
    u->ema.copy_(o_.stage == 0 ? full : full.narrow(0, comm_.rank() * u->shard, u->shard));
  }
}

void ZeroOptimizer::swap_ema() {
  if (ema_decay_ < 0) return;
  c10::NoGradGuard no_grad;
  for (auto& u : units_) {
    at::Tensor live = owned_slice(*u);
    const at::Tensor kept = live.detach().to(at::kCPU, at::kFloat, false, true);
    live.copy_(u->ema);
    u->ema.copy_(kept);
  }
  if (o_.stage > 0) gather_whole_units();  // the whole parameters follow the swapped shards
}

void ZeroOptimizer::gather_whole_units() {
  // Stages 1-3: every rank updated its shard of the units kept whole; all-gather them in buckets
  // of about allgather_bucket_size elements (one collective per bucket, rank-major layout).
  c10::NoGradGuard no_grad;
  const int world = comm_.world_size(), rank = comm_.rank();
  std::vector<Unit*> bucket;
  std::int64_t shards = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    std::vector<at::Tensor> mine;
    for (auto* u : bucket) mine.push_back(u->flat_param.narrow(0, rank * u->shard, u->shard));
    const at::Tensor send = at::cat(mine);  // a copy: the gather writes where the shards live
    at::Tensor all = at::empty({shards * world}, send.options());
    comm_.all_gather(send, all);
    for (int r = 0; r < world; ++r) {
      std::int64_t off = 0;
      for (auto* u : bucket) {
        u->flat_param.narrow(0, r * u->shard, u->shard).copy_(all.narrow(0, r * shards + off, u->shard));
        off += u->shard;
      }
    }
    bucket.clear();
    shards = 0;
  };
  for (auto& u : units_) {
    if (u->sharded) continue;
    bucket.push_back(u.get());
    shards += u->shard;
    if (shards * world >= o_.allgather_bucket_size) flush();
  }
  flush();
}

std::int64_t ZeroOptimizer::ema_bytes() const {
  std::int64_t n = 0;
  for (const auto& u : units_) n += bytes(u->ema);
  return n;
}

std::int64_t ZeroOptimizer::padded_numel() const {
  std::int64_t n = 0;
  for (const auto& u : units_) n += u->padded;
  return n;
}

std::int64_t ZeroOptimizer::persistent_numel() const {
  std::int64_t n = 0;
  for (const auto& u : units_)
    if (!u->sharded) n += u->padded;
  return n;
}

std::int64_t ZeroOptimizer::numel() const {
  std::int64_t n = 0;
  for (const auto& u : units_) n += u->numel;
  return n;
}

}  // namespace zs::zero
