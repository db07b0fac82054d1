#include "worker/gpu/stats_pairing.h"

namespace worker {
namespace gpu {

bool StatsPairing::predicted(const Conv& c) const {
  auto it = fed_.find(key(c));
  if (it == fed_.end()) {  // not seen in this phase: as in the other one (a layer's calls outside a model)
    Conv other = c;
    other.backward = !c.backward;
    it = fed_.find(key(other));
  }
  return it != fed_.end() && it->second;
}

void StatsPairing::conv_wrote(const Conv& c, bool stats) {
  written(c.y.p, c.y.bytes);
  if (stats) {
    // The slot now holds this output's sums, no longer an earlier output's.
    for (Output& o : live_)
      if (o.conv.slot.p == c.slot.p) o.has_stats = false;
    dirty_[c.slot.p] = c.slot.bytes;
  }
  Output o;
  o.conv = c;
  o.has_stats = stats;
  live_.push_back(o);
}

void StatsPairing::written(const void* p, size_t bytes) {
  for (size_t i = 0; i < live_.size();) {
    const Output& o = live_[i];
    if (!overlaps(o.conv.y, p, bytes)) {
      ++i;
      continue;
    }
    // The call's outcome: read by a training batch norm or not; an output only an evaluation pass read
    // says nothing about training.
    if (o.fed_train || !o.read_eval) fed_[key(o.conv)] = o.fed_train;
    live_[i] = live_.back();
    live_.pop_back();
  }
}

const void* StatsPairing::train_reads(const void* x, size_t bytes) {
  for (Output& o : live_) {
    if (o.conv.y.p != x || o.conv.y.bytes != bytes) continue;
    o.fed_train = true;
    fed_[key(o.conv)] = true;
    if (!o.has_stats) return nullptr;
    o.has_stats = false;  // taken once: the finalize zeroes the slot
    dirty_.erase(o.conv.slot.p);
    return o.conv.slot.p;
  }
  return nullptr;
}

bool StatsPairing::holds_sums(const void* x, size_t bytes) const {
  for (const Output& o : live_)
    if (o.conv.y.p == x && o.conv.y.bytes == bytes) return o.has_stats;
  return false;
}

void StatsPairing::eval_reads(const void* x, size_t bytes) {
  for (Output& o : live_)
    if (o.conv.y.p == x && o.conv.y.bytes == bytes) o.read_eval = true;
}

std::vector<Range> StatsPairing::drop_untaken() {
  for (Output& o : live_) o.has_stats = false;
  std::vector<Range> slots;
  for (const auto& [p, bytes] : dirty_) slots.push_back({p, bytes});
  dirty_.clear();
  return slots;
}

}  // namespace gpu
}  // namespace worker
