#include "worker/gpu/gpu_options.h"

namespace worker {
namespace gpu {

GpuOptions gpu_options(const Knobs& k, int device, DType precision) {
  GpuOptions o;
  o.device = device;
  o.precision = precision;
  o.allow_tf32 = k.gpu_tf32;
  o.search = k.cudnn_search;
  o.workspace_limit = k.cudnn_workspace_mb << 20;
  o.pool_chunk = k.gpu_pool_chunk_mb << 20;
  o.space_to_depth = k.conv_s2d;
  o.graph_engines = k.conv_graph_engines;
  o.conv_candidates = k.conv_candidates;
  o.plan_threads = k.plan_threads;
  o.deterministic = k.cudnn_deterministic;
  o.wgrad_stream = k.wgrad_stream;
  o.fused_stats = k.fp16_fused;
  o.relu_bits = k.relu_bits;
  o.bn_join = k.bn_join;
  o.stem_pool = k.stem_pool;
  o.pool_tiled = k.pool_tiled;
  o.conv_prologue = k.conv_prologue;
  o.dw_batched = k.dw_batched;
  o.unscale_adds_dw = k.unscale_adds_dw;
  o.graph_drop_zeroing = k.graph_drop_zeroing;
  return o;
}

}  // namespace gpu
}  // namespace worker
