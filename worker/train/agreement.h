// The start-up check that every rank trains the same run (issue 22, item 14): a rank started
// with another --optimizer, --seed or --depth used to be found by the final checksums, or never
// (a different --log-every or --bucket-mb hangs or garbles a collective instead).
//
// Each rank puts the settings that must agree into one canonical text (shared_settings: the
// options as parsed, and what follows from them and the data: the resolved precision, the data
// set's size and classes, the parameter count, the position a resume continues from) and the
// ranks all-gather its XXH3 hash before their first collective. When a hash differs they gather
// the texts, and every rank fails with one line naming the first rank that differs from rank 0,
// the options, and both values.
//
// --recipe itself is not compared: the options it sets are (as every option, however given).
// Settings that may differ per rank, left out: where a rank writes or reads (--metrics-file,
// --tensorboard, --dump-batch, the paths of --save, --resume and --init: a node may mount them
// elsewhere; whether --save is set is compared, as its saves are collective), how a rank runs
// (--device, --threads, --data-threads, --data-prefetch, --loader, --cuda-graph, --recompute:
// same results), --comm-timeout, --strict-data, and the data's path (the data set's size and
// classes are compared). --comm cannot be checked here: ranks of different communicators do not
// meet at all (their set-up fails with its own error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "worker/comm/comm.h"
#include "worker/core/ops.h"
#include "worker/train/options.h"

namespace worker {

struct Setting {
  std::string name;   // the option as the command line spells it, or what a derived value is
  std::string value;  // canonical text
};

// What the options lead to, beyond the options themselves.
struct RunFacts {
  DType precision = DType::F32;  // resolved: --precision auto is fp16 or bf16 on a GPU (precision.h), fp32 on the CPU
  int64_t train_samples = 0;     // the training split's size as this rank's data source sees it
  int64_t val_samples = 0;       // 0: no validation split
  int num_classes = 0;           // the model's
  size_t num_params = 0;
  int64_t resumed_step = 0, resumed_epoch = 0, resumed_batch = 0;  // where this run continues (0: afresh)
  int64_t resumed_start = 0;  // ... from this sample of the epoch (sampler.h's segments)
};

// Pure: the settings every rank must share, in a fixed order.
std::vector<Setting> shared_settings(const TrainOptions& o, const RunFacts& facts);

// "name=value" lines, the text whose hash the ranks compare.
std::string canonical_text(const std::vector<Setting>& settings);

// Pure: "" when every rank's text equals rank 0's; else the error every rank reports: the first
// rank that differs, up to three of the settings it differs in with both values, how many more.
std::string describe_disagreement(const std::vector<std::string>& texts);

// Collective (before any other): throws UsageError with describe_disagreement's text when the
// ranks' settings differ. A no-op for one rank.
void check_settings_agree(const std::vector<Setting>& mine, Comm& comm);

}  // namespace worker
