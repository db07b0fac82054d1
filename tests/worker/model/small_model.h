// A small ResNet's configuration for the worker/model tests (16x16 images, batch 2).
#pragma once

#include "worker/model/model.h"

namespace worker {

inline ModelConfig small_model(int depth, int width = 8, int classes = 10) {
  ModelConfig c;
  c.depth = depth;
  c.width = width;
  c.num_classes = classes;
  c.image_size = 16;
  c.batch = 2;
  return c;
}

}  // namespace worker
