#pragma once
// The image logger's samples/ folder read straight from disk (another run to compare with, live
// or finished, of any model family), and one prompt's image found in a step. The layout is the
// one engine/train/image_logger.cpp writes and RunController reads:
//   samples/step_<N>/000.png 001.png … grid.png prompts.json
// prompts.json: [{"file": "000.png", "prompt": "…", "seed": 42}, …] (older runs: a list of strings).

#include <vector>

#include <QList>
#include <QString>

#include "run_controller.h"

namespace zs::ui {

/// One image slot of a run's samples: the `occurrence`-th image of `prompt` in a step (a config
/// with sampling.images_per_prompt > 1 has several images per prompt). Matching by prompt, not by
/// position, finds the same prompt in another run whose prompt list differs.
struct PromptSlot {
  QString prompt;      ///< "" when the step has no prompts.json (then `occurrence` is the image index)
  int occurrence = 0;  ///< 0: the prompt's first image in a step
  /// "prompt", "prompt (2)" for a second image of it, "image 3" without prompts.
  QString label() const;
  bool operator==(const PromptSlot&) const = default;
};

/// samples/step_<N>/ of one step: its NNN.png files in name order and prompts.json's prompts.
SampleStep readSampleStep(const QString& stepDir, qint64 step);
/// Every samples/step_<N>/ under `runDir`, in step order. Folders still being written
/// (.step_<N>.tmp) are skipped; an empty list when the run has no samples.
std::vector<SampleStep> readSampleFolder(const QString& runDir);
/// `steps` in step order (the controller keeps the order of the events).
std::vector<SampleStep> sortedByStep(std::vector<SampleStep> steps);
/// The index in `steps` (step order) of the step nearest to `step`, the earlier one on a tie;
/// -1 when `steps` is empty.
int nearestStepIndex(const std::vector<SampleStep>& steps, qint64 step);
/// The image slots of `steps`: the newest step's in its order, then any only older steps have.
QList<PromptSlot> promptSlots(const std::vector<SampleStep>& steps);
/// The index of `slot`'s image in `step.images`, or -1 when the step has no such image.
int imageIndex(const SampleStep& step, const PromptSlot& slot);

}  // namespace zs::ui
