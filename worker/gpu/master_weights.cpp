#include "worker/gpu/master_weights.h"

#include <algorithm>
#include <string>

#include "worker/gpu/check.h"
#include "worker/gpu/side_stream.h"

namespace worker {
namespace gpu {

void MasterWeights::bind(float* params, size_t count) {
  if (!params && precision_ == DType::F32)
    throw GpuError(GpuError::Kind::Invalid, "fp32 weights are the working weights: they cannot be left unbound (" +
                                                where() + ")");
  params_ = params;
  count_ = count;
  if (precision_ != DType::F32) {
    shadow_ = pool_.alloc(count * dtype_size(precision_));
    shadow_bytes_ = count * dtype_size(precision_);
  }
}

void MasterWeights::params_updated() {
  if (!params_)
    throw GpuError(GpuError::Kind::Invalid,
                   "params_updated() with sharded master weights: import_master() brings updates in (" + where() + ")");
  if (side_) side_->join();
  if (shadow_) cast_from_f32(precision_, params_, shadow_, count_, dev_.stream);
}

// --- ZeRO-1's sharded master weights

void MasterWeights::shard(const std::vector<ParamView>& owned, const std::vector<ParamView>& fp32_views) {
  if (params_ || !shadow_ || master_)
    throw GpuError(GpuError::Kind::Invalid,
                   "shard_master_weights needs bind_params(nullptr, ...) in bf16/fp16, once (" + where() + ")");
  auto inside = [&](const ParamView& v) {
    if (v.offset > count_ || v.count > count_ - v.offset)
      throw GpuError(GpuError::Kind::Invalid, "shard_master_weights: a range leaves the buffer (" + where() + ")");
  };
  size_t kept = 0;
  for (const ParamView& r : owned) {
    inside(r);
    if (r.count == 0) continue;
    master_at_[r.offset] = {kept, r.count};
    kept += r.count;
  }
  std::vector<CopyRun> runs;
  size_t copies = 0;
  for (const ParamView& v : fp32_views) {
    inside(v);
    vec_at_[v.offset] = copies;
    if (!runs.empty() && runs.back().src + runs.back().count == v.offset)
      runs.back().count += v.count;  // weight and bias of one batch norm are neighbours
    else
      runs.push_back({v.offset, copies, v.count});
    copies += v.count;
  }
  master_bytes_ = std::max<size_t>(kept, 1) * sizeof(float);
  master_ = static_cast<float*>(alloc_zeroed(pool_, master_bytes_, dev_.stream));
  copies_bytes_ = std::max<size_t>(copies, 1) * sizeof(float) + runs.size() * sizeof(CopyRun);
  vec_ = static_cast<float*>(alloc_zeroed(pool_, std::max<size_t>(copies, 1) * sizeof(float), dev_.stream));
  vec_run_count_ = int(runs.size());
  if (!runs.empty()) {
    const size_t bytes = runs.size() * sizeof(CopyRun);
    vec_runs_ = static_cast<CopyRun*>(alloc_zeroed(pool_, bytes, dev_.stream));
    CUDA_CHECK(cudaMemcpyAsync(vec_runs_, runs.data(), bytes, cudaMemcpyHostToDevice, dev_.stream));
    dev_.wait();  // before `runs` goes
  }
}

void MasterWeights::export_master(float* whole, ParamView range) {
  if (!master_)
    throw GpuError(GpuError::Kind::Invalid, "export_master without sharded master weights (" + where() + ")");
  auto copy = [&](size_t offset, const ParamView& at) {
    if (side_) side_->guard_write(whole + offset, at.count * sizeof(float));
    CUDA_CHECK(cudaMemcpyAsync(whole + offset, master_ + at.offset, at.count * sizeof(float),
                               cudaMemcpyDeviceToDevice, dev_.stream));
  };
  if (range.count == 0) {
    for (const auto& [offset, at] : master_at_) copy(offset, at);
    return;
  }
  const auto it = master_at_.find(range.offset);
  if (it == master_at_.end() || it->second.count != range.count)
    throw GpuError(GpuError::Kind::Invalid, "export_master: [" + std::to_string(range.offset) + ", +" +
                                                std::to_string(range.count) + ") is not an owned range (" +
                                                where() + ")");
  copy(range.offset, it->second);
}

void MasterWeights::import_master(const float* whole) {
  if (!master_)
    throw GpuError(GpuError::Kind::Invalid, "import_master without sharded master weights (" + where() + ")");
  if (side_) side_->join();
  for (const auto& [offset, at] : master_at_)
    CUDA_CHECK(cudaMemcpyAsync(master_ + at.offset, whole + offset, at.count * sizeof(float),
                               cudaMemcpyDeviceToDevice, dev_.stream));
  gather_runs(whole, vec_, vec_runs_, vec_run_count_, dev_.stream);
  cast_from_f32(precision_, whole, shadow_, count_, dev_.stream);
}

// --- The views the layers and the optimizer read

const float* MasterWeights::f32(ParamView v) const {
  if (params_) return params_ + v.offset;
  const auto it = vec_at_.find(v.offset);
  if (it == vec_at_.end())
    throw GpuError(GpuError::Kind::Invalid, "parameter at " + std::to_string(v.offset) +
                                                " is read in fp32 but has no fp32 copy under sharded master weights (" +
                                                where() + ")");
  return vec_ + it->second;
}

float* MasterWeights::master_of(ParamView r) {
  if (params_) return params_ + r.offset;
  const auto it = master_at_.find(r.offset);
  if (it == master_at_.end() || r.count > it->second.count)
    throw GpuError(GpuError::Kind::Invalid, "optimizer step over [" + std::to_string(r.offset) + ", +" +
                                                std::to_string(r.count) + "), which is not an owned range (" +
                                                where() + ")");
  return master_ + it->second.offset;
}

const void* MasterWeights::weight(ParamView w) const {
  if (!params_ && !shadow_)
    throw GpuError(GpuError::Kind::Invalid, "GPU backend used before bind_params (" + where() + ")");
  if (precision_ == DType::F32) return params_ + w.offset;
  return static_cast<const char*>(shadow_) + w.offset * dtype_size(precision_);
}

}  // namespace gpu
}  // namespace worker
