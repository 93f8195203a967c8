#include "zero/sharded_init.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "core/error.h"

namespace zs::zero {

ShardedInit::ShardedInit(PlanOptions plan, std::optional<at::ScalarType> shard_dtype, std::string spill_dir)
    : plan_(std::move(plan)), spill_dir_(std::move(spill_dir)), shard_dtype_(shard_dtype) {
  plan_.world_size = std::max(plan_.world_size, 1);
}

ShardedInit::~ShardedInit() {
  if (spill_fd_ >= 0) ::close(spill_fd_);  // (the mappings keep the unlinked file until they go)
}

at::Tensor ShardedInit::spill(const at::Tensor& shard) {
  const std::int64_t bytes = shard.numel() * static_cast<std::int64_t>(shard.element_size());
  if (bytes == 0) return shard;
  if (spill_fd_ < 0) {
    const std::string path =
        spill_dir_ + "/zs-sharded-init-" + std::to_string(::getpid()) + "-" + std::to_string(plan_.rank) + ".tmp";
    spill_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (spill_fd_ < 0)
      throw Error(ErrorKind::io, path + ": cannot create the loading spill file (zero.offload_param.nvme_path): " +
                                     std::strerror(errno));
    ::unlink(path.c_str());  // gone with the process, whatever happens
  }
  const std::int64_t page = ::sysconf(_SC_PAGESIZE);
  const std::int64_t offset = spill_end_;
  const auto* data = static_cast<const char*>(shard.data_ptr());
  for (std::int64_t done = 0; done < bytes;) {
    const ssize_t n = ::pwrite(spill_fd_, data + done, static_cast<std::size_t>(bytes - done), offset + done);
    if (n <= 0)
      throw Error(ErrorKind::io, spill_dir_ + ": writing a parameter shard while loading failed (zero.offload_param."
                                 "nvme_path; is the disk full?): " + std::strerror(errno));
    done += n;
  }
  spill_end_ += (bytes + page - 1) / page * page;
  void* mapped = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE, spill_fd_, offset);
  if (mapped == MAP_FAILED) throw Error(ErrorKind::io, spill_dir_ + ": cannot map the loading spill file: " + std::strerror(errno));
  return at::from_blob(
      mapped, {shard.numel()}, [bytes](void* p) { ::munmap(p, static_cast<std::size_t>(bytes)); },
      at::TensorOptions().dtype(shard.scalar_type()));
}

models::UnitBuilt ShardedInit::callback() {
  return [this](const std::string& unit, const std::string&, torch::nn::Module& module) { take(unit, module); };
}

void ShardedInit::take(const std::string& name, torch::nn::Module& unit) {
  auto params = unit.named_parameters(true);
  Built b;
  for (const auto& p : params) {
    b.shapes.push_back(p.value().sizes().vec());
    b.numel += p.value().numel();
  }
  if (!shards_parameters(plan_, name, b.numel)) return;  // persistent: stays whole, as the optimizer keeps it
  c10::NoGradGuard no_grad;
  // This rank's elements [first, first + shard) of the unit flattened in parameter order and
  // padded as the plan pads it, copied one parameter at a time.
  const std::int64_t shard = padded_numel(plan_, b.numel) / plan_.world_size;
  const std::int64_t first = plan_.rank * shard;
  const auto options = params.size() ? params[0].value().options() : at::TensorOptions();
  const at::ScalarType dtype = options.dtype().toScalarType() == at::kHalf || options.dtype().toScalarType() == at::kBFloat16
                                   ? at::kFloat : options.dtype().toScalarType();
  b.shard = at::zeros({shard}, at::TensorOptions().dtype(shard_dtype_.value_or(dtype)));
  std::int64_t offset = 0;
  for (auto& p : params) {
    const std::int64_t n = p.value().numel();
    const std::int64_t lo = std::max(first, offset), hi = std::min(first + shard, offset + n);
    if (lo < hi) b.shard.narrow(0, lo - first, hi - lo).copy_(p.value().detach().reshape({-1}).narrow(0, lo - offset, hi - lo));
    offset += n;
    p.value().set_data(at::empty({0}, options));
  }
  if (!spill_dir_.empty()) b.shard = spill(b.shard);
  units_[name] = std::move(b);
}

void ShardedInit::attach(std::vector<models::ParamUnit>& units) const {
  std::size_t found = 0;
  for (auto& u : units) {
    const auto it = units_.find(u.name);
    if (it == units_.end()) continue;
    if (it->second.shapes.size() != u.parameters.size())
      throw std::logic_error("sharded init: unit " + u.name + " has " + std::to_string(u.parameters.size()) +
                                           " parameters, " + std::to_string(it->second.shapes.size()) + " were built");
    u.shard = it->second.shard;
    u.shapes = it->second.shapes;
    ++found;
  }
  if (found != units_.size())
    throw std::logic_error("sharded init: " + std::to_string(units_.size() - found) + " units built into shards are not in the optimizer");
}

std::int64_t ShardedInit::sharded_numel() const {
  std::int64_t n = 0;
  for (const auto& [name, b] : units_) n += b.numel;
  return n;
}

}  // namespace zs::zero
