// Opening an image data set (issue 11): the index of the split, the checks that make a bad data
// set an error before any training, and the back end that decodes it. The trainer reaches it
// through worker/train/data.h's make_batch_source (--data DIR|LISTFILE).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "worker/core/ops.h"
#include "worker/data/batch_source.h"
#include "worker/data/image_source.h"
#include "worker/data/loader_kind.h"
#include "worker/data/transform.h"

namespace worker {

// The folders an ImageFolder's validation split may have, looked for in this order (the first
// that exists is the split; --val-data DIR names another).
inline constexpr const char* kValFolders[] = {"val", "validation", "test"};

// The sizes of a sample of the training images, read from their headers (issue 25: the image
// size a run picks when none is given, and the warning when the one given is far above them).
struct ImageSizeSample {
  int sampled = 0;                             // headers read (unreadable files are left out)
  int median_short = 0, min_short = 0, max_short = 0;  // the short side, pixels
  int64_t median_pixels = 0;                   // width x height
};

// The image data set as the command line names it, how it is read and how it is augmented
// (train_resnet's --data DIR|LISTFILE, --val-data, --loader, --data-threads, ..., --crop-scale,
// --augment, ...): TrainOptions holds one, and each layer below takes the part it needs whole.
struct ImageSetOptions {
  std::string data;         // an ImageFolder DIR (DIR/train/<class>/..., DIR/val/<class>/...) or a list file
  std::string val_data;     // the val split: a folder of class folders or a list file (else DIR's val/ ...)
  Loader loader = Loader::Auto;
  ReadOptions read;         // threads, prefetch, strict, the largest file
  // Crop scale, flip, augment, padding, DCT scaling. Its size is not an option of its own: a source
  // opens at the run's image size (DataSourceOptions::image_size, --image-size).
  TransformConfig tf;
  // The training images' sizes, measured once at start-up (worker/train/settle.cpp) for the image
  // size and --loader auto; unset where nothing measured them (--loader auto then does).
  std::optional<ImageSizeSample> sizes;
};

struct DataSourceOptions {
  ImageSetOptions images;
  // The run's:
  int image_size = 224;
  int batch = 32;
  uint64_t seed = 0;
  int num_classes = 0;      // 0: the data's; else the model's classes (at least the data's)
  // From the launcher's environment (proto::WorkerEnv, read once by the trainer):
  int local_ranks = 1;      // ranks sharing this node's cores (the default thread count divides them)
  std::string log_dir;      // the launcher's log folder, a fallback place for the index cache ("": none)
};

// True when the GPU back end (nvJPEG) was compiled in.
bool nvjpeg_built();

// Opens the split of the data set and its back end. Throws DataError for anything wrong with
// the data (a missing path, an empty folder, a class without images, val classes that differ
// from train's), before any training.
std::unique_ptr<BatchSource> open_image_source(const DataSourceOptions& o, Split split, Ops& ops);

// Whether the split exists (an ImageFolder without val/, validation/ or test/ and without
// --val-data, a list file without --val-data: no).
bool has_split(const DataSourceOptions& o, Split split);
// The val split's folder or list file as the log names it ("" when there is none).
std::string val_split_name(const DataSourceOptions& o);

// `count` files spread evenly over the training split. Throws DataError as open_image_source.
ImageSizeSample sample_image_sizes(const DataSourceOptions& o, int count);
// How many training images' headers are read for their size (the image size a run picks when none
// is given, --loader auto's choice).
inline constexpr int kImageSizeSample = 64;

}  // namespace worker
