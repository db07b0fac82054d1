// The model state <-> torchvision state_dict mapping: conv weights OHWI inside, OIHW in the
// tensors; one num_batches_tracked for the whole model, written into every batch norm's entry.
#include "worker/model/state_dict.h"

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

namespace worker {

void check_finite(const float* values, size_t count, const std::string& what, const std::string& name) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(values[i])) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return;
  const float v = values[first];
  throw std::runtime_error(what + ": tensor '" + name + "' holds " + (std::isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf") +
                           " (element " + std::to_string(first) + " of " + std::to_string(count) + ", " +
                           std::to_string(bad) + " non-finite value(s)): it was saved from a run that had diverged; "
                           "resume from an earlier checkpoint (with a lower --lr)");
}

std::vector<StTensor> model_state_to_tensors(const Model& model, const ModelState& state) {
  if (state.params.size() != model.num_params() || state.buffers.size() != model.num_buffers())
    throw std::invalid_argument("model_state_to_tensors: state does not match the model");
  std::vector<StTensor> out;
  for (const StateEntry& e : model.state_entries()) {
    StTensor t;
    t.name = e.name;
    t.shape = e.shape;
    if (e.kind == StateKind::NumBatchesTracked) {
      t.dtype = "I64";
      t.data.resize(8);
      const uint64_t v = uint64_t(state.num_batches_tracked);
      for (int i = 0; i < 8; ++i) t.data[size_t(i)] = uint8_t(v >> (8 * i));
    } else {
      t.dtype = "F32";
      t.data.resize(e.count * sizeof(float));
      const float* src = (e.kind == StateKind::Param ? state.params.data() : state.buffers.data()) + e.offset;
      if (e.conv_weight) {
        ohwi_to_oihw(src, reinterpret_cast<float*>(t.data.data()), int(e.shape[0]), int(e.shape[1]),
                     int(e.shape[2]), int(e.shape[3]));
      } else {
        std::memcpy(t.data.data(), src, t.data.size());
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

ModelState model_state_from_tensors(const Model& model, const std::vector<StTensor>& tensors,
                                    const std::string& what) {
  std::map<std::string, const StTensor*> by_name;
  for (const StTensor& t : tensors) by_name[t.name] = &t;
  ModelState s;
  s.params.assign(model.num_params(), 0.0f);
  s.buffers.assign(model.num_buffers(), 0.0f);
  bool have_nbt = false;
  for (const StateEntry& e : model.state_entries()) {
    auto it = by_name.find(e.name);
    if (it == by_name.end())
      throw std::runtime_error(what + ": missing tensor '" + e.name + "' (shape " + shape_string(e.shape) +
                               "); was it saved from a ResNet of the same depth?");
    const StTensor& t = *it->second;
    if (t.shape != e.shape)
      throw std::runtime_error(what + ": tensor '" + e.name + "' has shape " + shape_string(t.shape) +
                               ", the model needs " + shape_string(e.shape) +
                               " (check --depth, --width, --num-classes)");
    if (e.kind == StateKind::NumBatchesTracked) {
      if (t.dtype != "I64")
        throw std::runtime_error(what + ": tensor '" + e.name + "' has dtype " + t.dtype + ", expected I64");
      uint64_t v = 0;
      for (int i = 0; i < 8; ++i) v |= uint64_t(t.data[size_t(i)]) << (8 * i);
      // One counter for the whole model: every BN sees the same number of batches.
      if (!have_nbt || int64_t(v) > s.num_batches_tracked) s.num_batches_tracked = int64_t(v);
      have_nbt = true;
      continue;
    }
    if (t.dtype != "F32")
      throw std::runtime_error(what + ": tensor '" + e.name + "' has dtype " + t.dtype + ", expected F32");
    float* dst = (e.kind == StateKind::Param ? s.params.data() : s.buffers.data()) + e.offset;
    const float* src = reinterpret_cast<const float*>(t.data.data());
    check_finite(src, e.count, what, e.name);
    if (e.conv_weight) {
      oihw_to_ohwi(src, dst, int(e.shape[0]), int(e.shape[1]), int(e.shape[2]), int(e.shape[3]));
    } else {
      std::memcpy(dst, src, e.count * sizeof(float));
    }
  }
  if (by_name.size() != tensors.size()) {
    for (size_t i = 0; i < tensors.size(); ++i)
      for (size_t j = i + 1; j < tensors.size(); ++j)
        if (tensors[i].name == tensors[j].name)
          throw std::runtime_error(what + ": duplicate tensor '" + tensors[i].name + "'");
  }
  for (const StTensor& t : tensors) {
    bool known = false;
    for (const StateEntry& e : model.state_entries()) known = known || e.name == t.name;
    if (!known)
      throw std::runtime_error(what + ": unexpected tensor '" + t.name +
                               "' (not part of this model; check --depth)");
  }
  return s;
}

}  // namespace worker
