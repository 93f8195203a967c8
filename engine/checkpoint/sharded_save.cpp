#include "checkpoint/sharded_save.h"

#include <filesystem>

#include <ATen/ATen.h>

#include "checkpoint/sharded_state.h"
#include "comm/communicator.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace zs::checkpoint {

namespace fs = std::filesystem;

namespace {

/// Whether every rank is fine (a collective with several ranks).
bool all_ok(comm::Communicator& comm, bool ok) {
  if (comm.world_size() == 1) return ok;
  at::Tensor flag = at::full({1}, ok ? 0.0 : 1.0);
  comm.all_reduce(flag);
  return flag.item<double>() == 0;
}

}  // namespace

SaveOutcome save_sharded(comm::Communicator& comm, const ShardedSave& save) {
  SaveOutcome out;
  const bool main_rank = comm.rank() == 0;
  const std::string staging = staging_dir(save.checkpoints_dir, save.tag);
  for (const auto& [name, t] : save.shard) out.needed_bytes += t.numel() * static_cast<std::int64_t>(t.element_size());
  // Rank 0 prepares the staging folder; the others wait for its verdict before writing into it.
  if (main_rank) {
    std::error_code ec;
    io::remove_tree(staging, ec);
    fs::create_directories(staging, ec);
    if (ec) out.problem = staging + ": cannot create: " + ec.message();
  }
  if (!all_ok(comm, out.problem.empty())) {
    out.own_problem = !out.problem.empty();
    if (!out.own_problem) out.problem = "another rank failed to prepare it";
    return out;
  }
  // Refuse, with a clear reason, when the shard cannot fit (several ranks share the disk).
  out.free_bytes = free_bytes(staging);
  if (out.free_bytes >= 0 && out.free_bytes < out.needed_bytes * (comm.world_size() > 1 ? 2 : 1))
    out.problem = staging + ": " + std::to_string(out.free_bytes >> 20) + " MiB free, this rank's shard needs " +
                  std::to_string(out.needed_bytes >> 20) + " MiB; free space on that disk";
  if (save.injected_failure) out.problem = *save.injected_failure;
  // Writing takes as long as this rank's disk needs (rank 0 holds everything at stage 0): a long
  // phase, not a collective's timeout, decides how long the others wait.
  comm.long_phase("writing checkpoint " + save.tag, [&] {
    if (!out.problem.empty() || save.shard.empty()) return;
    try {
      io::write_safetensors(staging + "/" + shard_file_name(comm.rank()), save.shard, {{"format", "pt"}});
    } catch (const std::exception& e) {
      out.problem = e.what();
    }
  });
  const bool mine_ok = out.problem.empty();
  if (!all_ok(comm, mine_ok)) {
    if (main_rank) {
      std::error_code ec;
      io::remove_tree(staging, ec);
    }
    out.own_problem = !mine_ok;
    if (mine_ok) out.problem = "another rank could not write its shard";
    return out;
  }
  // Rank 0 records sizes and checksums and moves the folder into place; every rank hears whether
  // that worked, so all agree on the outcome.
  comm.long_phase("completing checkpoint " + save.tag, [&] {  // CRC-32s of every file: long for big models
    if (!main_rank) return;
    try {
      out.info = finalize_checkpoint(save.checkpoints_dir, save.tag, save.meta);
    } catch (const std::exception& e) {
      out.problem = e.what();
    }
  });
  out.saved = all_ok(comm, out.problem.empty());
  out.own_problem = !out.problem.empty();
  if (!out.saved && !out.own_problem) out.problem = "rank 0 could not complete it";
  return out;
}

}  // namespace zs::checkpoint
