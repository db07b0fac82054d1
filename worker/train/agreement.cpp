#include "worker/train/agreement.h"

#define XXH_INLINE_ALL  // the implementation from the header: no library to link
#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <map>

namespace worker {

namespace {

// Exact: two ranks agree on a double when its bits do (what the run computes with).
std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

const char* yes(bool b) { return b ? "yes" : "no"; }

std::map<std::string, std::string> parse_text(const std::string& text) {
  std::map<std::string, std::string> m;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const size_t eq = line.find('=');
    if (eq != std::string::npos) m[line.substr(0, eq)] = line.substr(eq + 1);
    at = end + 1;
  }
  return m;
}

}  // namespace

std::vector<Setting> shared_settings(const TrainOptions& o, const RunFacts& f) {
  return {
      // --- the model and the run
      {"--depth", std::to_string(o.depth)},
      {"--width", std::to_string(o.width)},
      {"--num-classes (the model's)", std::to_string(f.num_classes)},
      {"--image-size", std::to_string(o.image_size)},
      {"--stem", to_string(o.stem)},
      {"--batch-size", std::to_string(o.batch_size)},
      {"--accum-steps", std::to_string(o.accum_steps)},
      {"--epochs", std::to_string(o.epochs)},
      {"--max-steps", std::to_string(o.max_steps)},
      {"--precision (resolved)", dtype_name(f.precision)},
      {"the parameter count", std::to_string(f.num_params)},
      {"--seed", std::to_string(o.seed)},
      // --- the optimizer and the recipe
      {"--optimizer", to_string(o.optimizer)},
      {"--lr", num(o.lr)},
      {"--momentum", num(o.momentum)},
      {"--weight-decay", num(o.weight_decay)},
      {"--nesterov", yes(o.nesterov)},
      {"--no-wd-on-bn-bias", yes(o.no_wd_on_bn_bias)},
      {"--lr-schedule", to_string(o.lr_schedule)},
      {"--warmup-epochs", num(o.warmup_epochs)},
      {"--lr-steps", list(o.lr_steps)},
      {"--lr-gamma", num(o.lr_gamma)},
      {"--lr-base-batch", std::to_string(o.lr_base_batch)},
      {"--label-smoothing", num(o.label_smoothing)},
      // --- the data (its path may differ per node; what is in it may not)
      {"--data (kind)", to_string(o.data)},
      {"the training data's size", std::to_string(f.train_samples)},
      {"the validation data's size", std::to_string(f.val_samples)},
      {"--crop-scale", num(o.images.tf.scale_min) + "," + num(o.images.tf.scale_max)},
      {"--hflip", num(o.images.tf.hflip)},
      {"--augment", to_string(o.images.tf.augment)},
      {"--crop-padding", std::to_string(o.images.tf.padding)},
      {"--decode-scaling", o.images.tf.dct_scaling ? "on" : "off"},
      {"--max-image-bytes", std::to_string(o.images.read.max_image_bytes)},
      // --- what is collective: logging, validation, saving, the buckets, ZeRO
      {"--log-every", std::to_string(o.log_every)},
      {"--eval-every", std::to_string(o.eval_every)},
      {"--eval-only", yes(o.eval_only)},
      {"--save (set)", yes(!o.save.empty())},
      {"--save-every", std::to_string(o.save_every)},
      {"--save-best", yes(o.save_best)},
      {"--log-samples (set)", yes(!o.log_samples.empty())},
      {"--zero", std::to_string(o.zero)},
      {"--bucket-mb", num(o.bucket_mb)},
      // --- where a resumed run continues
      {"the resumed position (step, epoch, batch, sample)",
       std::to_string(f.resumed_step) + ", " + std::to_string(f.resumed_epoch) + ", " + std::to_string(f.resumed_batch) +
           ", " + std::to_string(f.resumed_start)},
  };
}

std::string canonical_text(const std::vector<Setting>& settings) {
  std::string t;
  for (const Setting& s : settings) t += s.name + "=" + s.value + "\n";
  return t;
}

std::string describe_disagreement(const std::vector<std::string>& texts) {
  if (texts.empty()) return "";
  const auto ref = parse_text(texts[0]);
  int first = -1, others = 0;
  std::vector<std::string> diffs;
  size_t more = 0;
  for (size_t r = 1; r < texts.size(); ++r) {
    if (texts[r] == texts[0]) continue;
    if (first >= 0) {
      ++others;
      continue;
    }
    first = int(r);
    const auto mine = parse_text(texts[r]);
    std::map<std::string, std::string> all = ref;
    all.insert(mine.begin(), mine.end());
    for (const auto& [name, unused] : all) {
      const auto a = ref.find(name);
      const auto b = mine.find(name);
      const std::string va = a == ref.end() ? "(none)" : a->second, vb = b == mine.end() ? "(none)" : b->second;
      if (va == vb) continue;
      if (diffs.size() < 3) {
        diffs.push_back(name + " " + vb + " on rank " + std::to_string(r) + ", " + va + " on rank 0");
      } else {
        ++more;
      }
    }
  }
  if (first < 0) return "";
  std::string msg = "the ranks do not train the same run: ";
  for (size_t i = 0; i < diffs.size(); ++i) msg += (i ? "; " : "") + diffs[i];
  if (more > 0) msg += " (and " + std::to_string(more) + " more)";
  if (others > 0) msg += "; " + std::to_string(others) + " more rank(s) differ from rank 0";
  return msg + ". Start every rank with the same options (only paths, --device, --threads and the like may differ)";
}

void check_settings_agree(const std::vector<Setting>& mine, Comm& comm) {
  const int world = comm.size();
  if (world == 1) return;
  const std::string text = canonical_text(mine);
  const uint64_t hash = XXH3_64bits(text.data(), text.size());
  std::vector<uint64_t> hashes(size_t(world), 0);
  comm.allgather_host(&hash, hashes.data(), sizeof hash);
  if (std::all_of(hashes.begin(), hashes.end(), [&](uint64_t h) { return h == hashes[0]; })) return;
  // Some rank differs: every rank gathers every text (lengths first, then padded to the longest).
  const uint64_t len = text.size();
  std::vector<uint64_t> lens(size_t(world), 0);
  comm.allgather_host(&len, lens.data(), sizeof len);
  const size_t width = size_t(*std::max_element(lens.begin(), lens.end()));
  std::string padded = text;
  padded.resize(width, '\0');
  std::string all(width * size_t(world), '\0');
  comm.allgather_host(padded.data(), all.data(), width);
  std::vector<std::string> texts;
  for (int r = 0; r < world; ++r) texts.push_back(all.substr(size_t(r) * width, size_t(lens[size_t(r)])));
  const std::string why = describe_disagreement(texts);
  // Every rank leaves with the texts in hand: one that left at once could cut off the last bytes
  // of another's all-gather (its unread input makes the kernel reset the connection).
  try {
    comm.barrier_untimed();
  } catch (const CommFailure&) {
  }
  throw UsageError(why.empty() ? "the ranks' settings hash differently but read the same (a bug)" : why);
}

}  // namespace worker
