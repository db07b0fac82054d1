// From train_resnet's options to the data the trainer reads (issue 11): nothing for synthetic
// data (the trainer generates it, Ops::make_batch), else the image source of the train split
// (worker/data/make_batch_source.h), with the options its data decides: the sample count and,
// unless --num-classes was given, the classes.
#pragma once

#include <memory>

#include "worker/core/ops.h"
#include "worker/data/batch_source.h"
#include "worker/data/make_batch_source.h"
#include "worker/train/options.h"

namespace worker {

DataSourceOptions data_source_options(const TrainOptions& o);

// Opens --data's train split (DataError on bad data). Updates `o`: num_samples = the images of
// the split; num_classes = the data's classes unless given (then it must hold them all).
std::unique_ptr<BatchSource> open_train_data(TrainOptions& o, Ops& ops);

}  // namespace worker
