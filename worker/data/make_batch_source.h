// The seam between the trainer and the data: --data names synthetic data (random, learnable:
// the trainer keeps generating those with Ops::make_batch) or an image data set, which this
// factory opens (index, checks) and hands to the back end that decodes it.
#pragma once

#include <memory>
#include <string>

#include "worker/core/ops.h"
#include "worker/data/batch_source.h"
#include "worker/data/loader_kind.h"
#include "worker/data/transform.h"

namespace worker {

struct DataSourceOptions {
  std::string data;         // an ImageFolder DIR (DIR/train/<class>/..., DIR/val/<class>/...) or a list file
  std::string val_data;     // the val split's list file (a list-file --data only)
  Loader loader = Loader::Auto;
  int threads = 0;          // decode threads per rank; 0: the node's cores / LOCAL_WORLD_SIZE
  int prefetch = 3;         // micro-batches decoded ahead
  bool strict = false;
  int batch = 32;
  uint64_t seed = 0;
  TransformConfig tf;       // size, crop scale, flip, augment, DCT scaling
};

bool is_synthetic_data(const std::string& data);  // "random" or "learnable"

// True when the GPU back end (nvJPEG) was compiled in.
bool nvjpeg_built();

// Opens the split of the data set and its back end. Throws DataError for anything wrong with
// the data (a missing path, an empty folder, a class without images, val classes that differ
// from train's), before any training.
std::unique_ptr<BatchSource> make_batch_source(const DataSourceOptions& o, Split split, Ops& ops);

// Whether the split exists (an ImageFolder without val/, a list file without --val-data: no).
bool has_split(const DataSourceOptions& o, Split split);

}  // namespace worker
