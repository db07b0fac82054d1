#include "worker/train/data_setup.h"

#include "worker/data/data_error.h"

namespace worker {

DataSourceOptions data_source_options(const TrainOptions& o) {
  DataSourceOptions d;
  d.data = o.data;
  d.val_data = o.val_data;
  d.loader = o.loader;
  d.threads = o.data_threads;
  d.prefetch = o.data_prefetch;
  d.strict = o.strict_data;
  d.batch = o.batch_size;
  d.seed = o.seed;
  d.tf.size = o.image_size;
  d.tf.scale_min = o.crop_scale_min;
  d.tf.scale_max = o.crop_scale_max;
  d.tf.hflip = o.hflip;
  d.tf.augment = o.augment;
  d.tf.dct_scaling = o.decode_scaling;
  return d;
}

std::unique_ptr<BatchSource> open_train_data(TrainOptions& o, Ops& ops) {
  if (is_synthetic_data(o.data)) return nullptr;
  std::unique_ptr<BatchSource> src = make_batch_source(data_source_options(o), Split::Train, ops);
  const SplitInfo& info = src->info();
  o.num_samples = info.size;
  if (!o.num_classes_given) {
    o.num_classes = info.num_classes;
  } else if (o.num_classes < info.num_classes) {
    throw DataError("--num-classes " + std::to_string(o.num_classes) + " is fewer than the " +
                    std::to_string(info.num_classes) + " classes of --data " + o.data +
                    " (leave --num-classes out to use the data's)");
  }
  return src;
}

}  // namespace worker
