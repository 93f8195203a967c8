#pragma once
// The contract of a run's events.jsonl: the event types and the keys their readers use. The
// trainer writes them (train/events.h), and the GUI's RunController, the TensorBoard writer,
// `zerostudio train`'s progress line and the launcher read them; all of them name types and
// keys through this header, so a rename is one change that every reader follows. Every event is
// one flat JSON object with "type", "time" (Unix seconds) and "step" (optimizer steps done).
// No dependencies: the GUI includes it.

namespace zs::train::event {

// Types.
inline constexpr char run_start[] = "run_start";  ///< run_dir, resumed_from, max_steps, parameters, world_size, device, dataset…
inline constexpr char metrics[] = "metrics";      ///< loss, loss_smoothed, lr, grad_norm, samples_per_s, s_per_step, epoch, ranks…
inline constexpr char validation[] = "validation";  ///< val_loss (val_loss_ema with EMA)
inline constexpr char samples[] = "samples";      ///< dir (its grid.png), count
inline constexpr char checkpoint[] = "checkpoint";  ///< path, bytes, reason
inline constexpr char save_failed[] = "save_failed";  ///< tag, message, needed_bytes, free_bytes, rank
inline constexpr char overflow[] = "overflow";    ///< loss_scale, next_loss_scale, skipped_steps (fp16)
inline constexpr char paused[] = "paused";
inline constexpr char resumed[] = "resumed";
inline constexpr char log[] = "log";              ///< message
inline constexpr char warning[] = "warning";      ///< message
inline constexpr char error[] = "error";          ///< message
inline constexpr char run_end[] = "run_end";      ///< reason (finished, stopped, error, save_failed…), loss

// Keys every event has.
inline constexpr char type[] = "type";
inline constexpr char time[] = "time";
inline constexpr char step[] = "step";

// Keys of the types above.
inline constexpr char message[] = "message";
inline constexpr char reason[] = "reason";
inline constexpr char dir[] = "dir";
inline constexpr char path[] = "path";
inline constexpr char max_steps[] = "max_steps";
inline constexpr char world_size[] = "world_size";
inline constexpr char loss[] = "loss";
inline constexpr char loss_smoothed[] = "loss_smoothed";
inline constexpr char lr[] = "lr";
inline constexpr char grad_norm[] = "grad_norm";
inline constexpr char samples_per_s[] = "samples_per_s";
inline constexpr char s_per_step[] = "s_per_step";
inline constexpr char epoch[] = "epoch";
inline constexpr char loss_scale[] = "loss_scale";
inline constexpr char ranks[] = "ranks";  ///< metrics: one object per rank (train/rank_figures.h)
inline constexpr char val_loss[] = "val_loss";
inline constexpr char val_loss_ema[] = "val_loss_ema";

// metrics.ranks[r]: one rank's memory (train/rank_figures.h writes the whole object).
inline constexpr char rank[] = "rank";
inline constexpr char rss_bytes[] = "rss_bytes";
inline constexpr char gpu_allocated_bytes[] = "gpu_allocated_bytes";
inline constexpr char gpu_reserved_bytes[] = "gpu_reserved_bytes";
inline constexpr char gpu_peak_bytes[] = "gpu_peak_bytes";

// run_end reasons a reader acts on.
inline constexpr char reason_error[] = "error";
inline constexpr char reason_save_failed[] = "save_failed";

}  // namespace zs::train::event
