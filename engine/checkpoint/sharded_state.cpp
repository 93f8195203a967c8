#include "checkpoint/sharded_state.h"

#include <algorithm>
#include <filesystem>

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include "core/error.h"
#include "io/safetensors.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

nlohmann::json sharding_json(const std::vector<UnitLayout>& units, int world_size, int stage) {
  nlohmann::json out = {{"world_size", world_size}, {"stage", stage}, {"units", nlohmann::json::array()}};
  for (const auto& u : units) {
    nlohmann::json params = nlohmann::json::array();
    for (const auto& p : u.params) params.push_back({{"name", p.name}, {"offset", p.offset}, {"shape", p.shape}});
    out["units"].push_back(
        {{"name", u.name}, {"numel", u.numel}, {"padded", u.padded}, {"dtype", u.dtype}, {"params", params}});
  }
  return out;
}

std::pair<std::int64_t, std::int64_t> saved_range(const UnitLayout& u, int rank, int world_size, int stage) {
  if (stage == 0) return {0, rank == 0 ? u.padded : 0};
  const std::int64_t shard = u.padded / world_size;
  return {rank * shard, shard};
}

std::string shard_file_name(int rank) { return "rank" + std::to_string(rank) + ".safetensors"; }

ShardReader::ShardReader(const std::string& dir, const nlohmann::json& sharding) : dir_(dir) {
  try {
    world_ = sharding.at("world_size").get<int>();
    stage_ = sharding.at("stage").get<int>();
    for (const auto& ju : sharding.at("units")) {
      UnitLayout u;
      u.name = ju.at("name").get<std::string>();
      u.numel = ju.at("numel").get<std::int64_t>();
      u.padded = ju.at("padded").get<std::int64_t>();
      u.dtype = ju.value("dtype", std::string("F32"));
      for (const auto& jp : ju.at("params"))
        u.params.push_back({jp.at("name").get<std::string>(), jp.at("offset").get<std::int64_t>(),
                            jp.at("shape").get<std::vector<std::int64_t>>()});
      by_name_[u.name] = units_.size();
      units_.push_back(std::move(u));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(ErrorKind::checkpoint, dir + "/meta.json: the sharding index is damaged: " + e.what());
  }
  for (int r = 0; r < world_; ++r) {
    const std::string path = (fs::path(dir) / shard_file_name(r)).string();
    const bool writes = stage_ != 0 || r == 0;
    if (!writes) {
      files_.push_back(nullptr);
      continue;
    }
    if (!fs::exists(path))
      throw Error(ErrorKind::checkpoint, path + ": missing (the checkpoint was saved by " + std::to_string(world_) +
                                             " ranks and each wrote one file)");
    files_.push_back(std::make_unique<io::SafetensorsReader>(path));
  }
}

ShardReader::~ShardReader() = default;

at::Tensor ShardReader::parameter(const std::string& name, const std::string& kind) const {
  for (const auto& u : units_)
    for (const auto& p : u.params)
      if (p.name == name) return read(u.name, kind, p.offset, c10::multiply_integers(p.shape)).view(p.shape);
  throw Error(ErrorKind::checkpoint, dir_ + ": the checkpoint has no parameter " + name);
}

bool ShardReader::same_layout(const UnitLayout& target) const {
  const auto it = by_name_.find(target.name);
  if (it == by_name_.end()) return false;
  const UnitLayout& saved = units_[it->second];
  return saved.numel == target.numel && saved.params.size() == target.params.size() &&
         std::equal(saved.params.begin(), saved.params.end(), target.params.begin(),
                    [](const ParamSlot& a, const ParamSlot& b) { return a.name == b.name && a.offset == b.offset; });
}

at::Tensor ShardReader::read_blocks(const UnitLayout& target, const std::string& kind, std::int64_t first,
                                    std::int64_t count, std::int64_t block) const {
  if (!same_layout(target)) return {};
  const UnitLayout& u = units_[by_name_.at(target.name)];
  const std::string name = u.name + "/" + kind;
  const std::int64_t blocks = (u.numel + block - 1) / block;
  at::Tensor out = at::zeros({count}, at::kFloat);
  for (int r = 0; r < world_; ++r) {
    if (!files_[static_cast<std::size_t>(r)]) continue;
    const auto [begin, len] = saved_range(u, r, world_, stage_);
    if (begin % block != 0 || len % block != 0) return {};  // not cut on block boundaries
    const std::int64_t b0 = begin / block;
    const std::int64_t lo = std::max(first, b0), hi = std::min({first + count, b0 + len / block, blocks});
    if (lo >= hi) continue;
    const auto& file = *files_[static_cast<std::size_t>(r)];
    if (!file.contains(name)) return {};
    out.narrow(0, lo - first, hi - lo).copy_(file.slice(name, lo - b0, hi - lo));
  }
  return out;
}

const std::pair<std::string, std::int64_t>* ShardReader::slot_of(const std::string& parameter) const {
  if (slots_.empty())
    for (const auto& u : units_)
      for (const auto& p : u.params) slots_[p.name] = {u.name, p.offset};
  const auto where = slots_.find(parameter);
  return where == slots_.end() ? nullptr : &where->second;
}

at::Tensor ShardReader::replicated(const std::string& parameter, const std::string& kind) const {
  if (const auto* where = slot_of(parameter)) {
    const std::string name = where->first + "/" + kind + ":" + parameter;
    for (const auto& file : files_)
      if (file && file->contains(name)) return file->tensor(name);
  }
  throw Error(ErrorKind::checkpoint, dir_ + ": the checkpoint has no " + kind + " state for " + parameter +
                                         " (saved with another optimizer.type?)");
}

at::Tensor ShardReader::read_state(const UnitLayout& target, const std::string& kind, std::int64_t first,
                                   std::int64_t count, std::int64_t quant_block) const {
  if (kind.rfind("adafactor:", 0) == 0) return replicated(kind.substr(10), "adafactor");
  if (kind.size() > 7 && kind.compare(kind.size() - 7, 7, ".absmax") == 0)
    return read_blocks(target, kind, first, count, quant_block);
  return read_as(target, kind, first, count);
}

at::Tensor ShardReader::read_as(const UnitLayout& target, const std::string& kind, std::int64_t first,
                                std::int64_t count) const {
  // The same unit as saved: read it straight.
  if (same_layout(target)) return read(target.name, kind, first, count);
  // Cut differently (a transformer saved whole, resumed as one unit per block): parameter by
  // parameter from wherever each one was saved.
  at::Tensor out;
  for (const ParamSlot& p : target.params) {
    const std::int64_t n = c10::multiply_integers(p.shape);
    const std::int64_t lo = std::max(first, p.offset), hi = std::min(first + count, p.offset + n);
    if (lo >= hi) continue;
    const auto* where = slot_of(p.name);
    if (!where)
      throw Error(ErrorKind::checkpoint, dir_ + ": the checkpoint has no parameter " + p.name + " (another model?)");
    const at::Tensor part = read(where->first, kind, where->second + (lo - p.offset), hi - lo);
    if (!out.defined()) out = at::zeros({count}, part.options());
    out.narrow(0, lo - first, hi - lo).copy_(part);
  }
  if (!out.defined()) out = at::zeros({count}, at::kFloat);  // all padding
  return out;
}

std::vector<std::string> ShardReader::parameter_names() const {
  std::vector<std::string> out;
  for (const auto& u : units_)
    for (const auto& p : u.params) out.push_back(p.name);
  return out;
}

bool ShardReader::has(const std::string& kind) const {
  return !units_.empty() && files_.front() && files_.front()->contains(units_.front().name + "/" + kind);
}

at::Tensor ShardReader::read(const std::string& unit, const std::string& kind, std::int64_t first,
                             std::int64_t count) const {
  const auto it = by_name_.find(unit);
  if (it == by_name_.end())
    throw Error(ErrorKind::checkpoint, dir_ + ": the checkpoint has no unit " + unit + " (another model?)");
  const UnitLayout& u = units_[it->second];
  at::Tensor out;
  for (int r = 0; r < world_; ++r) {
    if (!files_[static_cast<std::size_t>(r)]) continue;
    const auto [begin, len] = saved_range(u, r, world_, stage_);
    const std::int64_t lo = std::max(first, begin), hi = std::min({first + count, begin + len, u.numel});
    if (lo >= hi) continue;
    const auto& file = *files_[static_cast<std::size_t>(r)];
    const std::string name = unit + "/" + kind;
    if (!file.contains(name)) throw Error(ErrorKind::checkpoint, file.path() + ": missing tensor " + name);
    // Only the overlapping elements are read from the mapping (export streams through here).
    const at::Tensor part = file.slice(name, lo - begin, hi - lo);
    if (!out.defined()) out = at::zeros({count}, part.options());
    out.narrow(0, lo - first, hi - lo).copy_(part);
  }
  if (!out.defined()) out = at::zeros({count}, at::kFloat);  // all padding
  return out;
}

}  // namespace zs::checkpoint
