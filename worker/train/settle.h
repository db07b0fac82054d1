// Options settled at start-up from what the run reads (issue 25), before anything is built:
//   --eval-only: the architecture (depth, width, stem, classes, image size) and the loss's label
//     smoothing from the --init checkpoint's metadata (architecture.h), where the command line
//     does not give them; an architecture option that contradicts the checkpoint is an error;
//   image data without an --image-size (from the command line or the recipe): the image size
//     from a sample of the training images' headers: their median short side, at most 224;
//   a warning where --image-size is more than twice the images' median short side;
//   the sample itself, kept in ImageSetOptions::sizes for --loader auto.
#pragma once

#include <string>
#include <vector>

#include "worker/train/options.h"

namespace worker {

struct Settled {
  std::vector<std::string> lines;     // for rank 0's log
  std::vector<std::string> warnings;  // for rank 0's stderr ("train_resnet: warning: ...")
};

Settled settle_options(TrainOptions& o);

}  // namespace worker
