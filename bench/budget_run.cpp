#include "budget_run.h"

#include <atomic>
#include <chrono>
#include <thread>

namespace zs::bench {

BudgetRun train_within_budget(const config::TrainerConfig& cfg, const std::string& run_dir, double budget_s) {
  train::TrainerOptions opt;
  opt.run_dir = run_dir;
  train::Trainer trainer(cfg, opt);
  train::TrainerCommands commands;
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    while (!done && elapsed() < budget_s) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (!done) commands.request_stop();
  });
  BudgetRun r;
  try {
    r.summary = trainer.run(commands);
  } catch (...) {
    done = true;
    watchdog.join();
    throw;
  }
  done = true;
  watchdog.join();
  r.seconds = elapsed();
  return r;
}

}  // namespace zs::bench
