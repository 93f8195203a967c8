// Fuzz targets for the trainer's own text files, one binary each (ZS_FUZZ_TEXT):
//   trainer_yaml    a trainer YAML (config/config_loader.h: parse, migrate, convert, validate)
//   deepspeed_json  a DeepSpeed JSON (config/config_import.h), imported onto the defaults
//   queue_json      the job queue's queue.json (train/job_queue.h): read, then every change a
//                   runner or the GUI makes (claim, finish, move, pause) on what was read
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "config/config_import.h"
#include "config/config_loader.h"
#include "config/validation.h"
#include "fuzz_support.h"
#include "train/job_queue.h"

namespace {

const std::string kTarget = ZS_FUZZ_TEXT;

zs::fuzz::Seeds seeds() {
  namespace fs = std::filesystem;
  zs::fuzz::Seeds out;
  if (kTarget == "trainer_yaml") {
    for (const auto& e : fs::directory_iterator(std::string(ZS_FUZZ_SOURCE) + "/configs"))
      if (e.path().extension() == ".yaml") out.emplace_back(e.path().filename().string(), zs::fuzz::read_file(e.path()));
  } else if (kTarget == "deepspeed_json") {
    for (const char* f : {"seeds/files/ds_z3_cpuoffload.json"}) {
      const std::string p = std::string(ZS_FUZZ_SHARED) + "/" + f;
      if (fs::exists(p)) out.emplace_back(fs::path(p).filename().string(), zs::fuzz::read_file(p));
    }
    out.emplace_back("small.json",
                     R"({"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": 4,
 "gradient_clipping": 1.0, "bf16": {"enabled": true},
 "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp/x"},
   "offload_param": {"device": "cpu", "pin_memory": true}, "overlap_comm": true,
   "stage3_max_live_parameters": 1e9, "reduce_bucket_size": "auto"}})");
  } else {
    out.emplace_back("queue.json", R"({"format": "zerostudio-queue", "version": 1, "paused": false, "next_id": 3, "jobs": [
 {"id": 1, "name": "a", "source": "/x/a.yaml", "overrides": ["training.max_steps=3"], "config": "/q/queue-jobs/1.yaml",
  "run_dir": "/r/a", "working_dir": "/x", "num_processes": 1, "state": "running", "exit_code": 0,
  "last_error": "", "fit_note": "", "added_at": 1, "started_at": 2, "ended_at": 0, "starts": 1,
  "stop_requested": false, "runner_pid": 12, "pid": 13},
 {"id": 2, "name": "b", "source": "/x/b.yaml", "overrides": [], "config": "/q/queue-jobs/2.yaml",
  "run_dir": "/r/b", "working_dir": "/x", "num_processes": 2, "state": "waiting", "exit_code": 0,
  "last_error": "", "fit_note": "", "added_at": 1, "started_at": 0, "ended_at": 0, "starts": 0,
  "stop_requested": false, "runner_pid": 0, "pid": 0}]})");
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  zs::fuzz::initialize(seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (kTarget == "trainer_yaml") {
    zs::fuzz::expect_accept_or_refuse([&] {
      const zs::config::LoadedConfig loaded = zs::config::load_config_string(text, "fuzz.yaml");
      std::vector<std::string> warnings;
      (void)zs::config::validate(loaded, &warnings);
    });
  } else if (kTarget == "deepspeed_json") {
    zs::fuzz::expect_accept_or_refuse([&] {
      std::vector<zs::config::ConfigLeaf> leaves;
      std::vector<zs::config::ConfigProblem> problems;
      std::vector<std::string> warnings;
      const zs::config::LoadedConfig base;
      zs::config::deepspeed_json_leaves(text, "fuzz.json", base.config, leaves, problems, warnings);
      if (problems.empty()) (void)zs::config::apply_leaves(base, leaves);
    });
  } else {
    static const std::string dir = zs::fuzz::scratch() + "/queue";
    zs::fuzz::write_file("queue/queue.json", text);
    zs::fuzz::expect_accept_or_refuse([&] {
      const zs::train::JobQueue q(dir);
      const zs::train::QueueState s = q.read();
      for (const auto& job : s.jobs) (void)q.shown_state(job);
      if (s.jobs.empty()) return;
      const std::int64_t id = s.jobs.front().id;
      q.move(id, s.jobs.size() - 1);
      q.set_paused(false);
      if (auto claimed = q.claim_next(1)) q.finish(claimed->job.id, zs::train::JobState::finished, 0, "");
      q.request_stop(id);
      q.remove(id);
    });
  }
  return 0;
}
