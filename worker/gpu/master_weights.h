// The weights the layers read and the optimizer updates, in their three forms:
//   - the fp32 master weights: the model's parameter buffer (bind), or, with ZeRO-1's sharded
//     masters (shard; the buffer is unbound then), only this rank's owned ranges, back to back;
//   - the working copy in the compute dtype (bf16/fp16: the shadow), which the convolutions and
//     the fully connected layer read, cast from the masters after each update;
//   - under sharded masters, fp32 copies of the parameters the layers read in fp32 (batch norm's,
//     the FC bias), which are not all owned by this rank.
// The whole fp32 weights pass through a buffer of the caller's (the spent gradient buffer):
// export_master writes this rank's ranges into it, import_master reads the gathered whole back.
#pragma once

#include <cstddef>
#include <map>
#include <unordered_map>
#include <vector>

#include "worker/core/ops.h"
#include "worker/gpu/device.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/pool.h"

namespace worker {
namespace gpu {

class SideStream;

class MasterWeights {
 public:
  // side: the weight-gradient stream whose pending work the copies respect (null: none).
  MasterWeights(DType precision, DevicePool& pool, Device& dev, SideStream* side)
      : precision_(precision), pool_(pool), dev_(dev), side_(side) {}
  MasterWeights(const MasterWeights&) = delete;
  MasterWeights& operator=(const MasterWeights&) = delete;

  // The model's fp32 parameters (null in bf16/fp16 before shard()); in bf16/fp16 the shadow is
  // carved, the caller fills it (params_updated or import_master).
  void bind(float* params, size_t count);
  // The shadow from the fp32 parameters, after an update (bound parameters only).
  void params_updated();
  // ZeRO-1: keep only `owned`'s fp32 weights (after bind(nullptr, ...), once), and fp32 copies
  // of `fp32_views`.
  void shard(const std::vector<ParamView>& owned, const std::vector<ParamView>& fp32_views);
  // This rank's master weights into `whole` at their offsets: every owned range, or `range`.
  void export_master(float* whole, ParamView range);
  // The masters, the fp32 copies and the shadow from the whole weights.
  void import_master(const float* whole);

  const void* weight(ParamView w) const;  // the compute-dtype view the layers read
  // The fp32 values of a parameter the layers read in fp32: the master weights, or under sharded
  // masters their whole fp32 copy.
  const float* f32(ParamView v) const;
  float* master_of(ParamView range);  // the fp32 master weights an optimizer step over `range` updates

  size_t count() const { return count_; }
  bool has_shadow() const { return shadow_ != nullptr; }
  bool sharded() const { return master_ != nullptr; }
  // Bytes carved: the shadow, the sharded masters, the fp32 copies (with their copy runs).
  size_t shadow_bytes() const { return shadow_bytes_; }
  size_t master_bytes() const { return master_bytes_; }
  size_t copies_bytes() const { return copies_bytes_; }

 private:
  DType precision_;
  DevicePool& pool_;
  Device& dev_;
  SideStream* side_;

  float* params_ = nullptr;
  size_t count_ = 0;
  void* shadow_ = nullptr;  // params_ in the compute dtype (bf16/fp16 only)
  // Sharded masters (params_ is null then): the owned ranges' fp32 weights back to back, by range
  // offset {index in master_, count}; the 1-D parameters' fp32 copies back to back, by parameter
  // offset their index in vec_, and the runs that fill them from a whole buffer (device memory).
  float* master_ = nullptr;
  std::map<size_t, ParamView> master_at_;
  float* vec_ = nullptr;
  std::unordered_map<size_t, size_t> vec_at_;
  CopyRun* vec_runs_ = nullptr;
  int vec_run_count_ = 0;
  size_t shadow_bytes_ = 0, master_bytes_ = 0, copies_bytes_ = 0;
};

}  // namespace gpu
}  // namespace worker
