// ResNet configurations for the worker/model tests.
#pragma once

#include "worker/model/model.h"

namespace worker {

// torchvision's width 64 and 1000 classes at a given depth, batch, stem and image size.
inline ModelConfig model_config(int depth, int batch, Stem stem = Stem::ImageNet, int image_size = 224) {
  ModelConfig c;
  c.depth = depth;
  c.batch = batch;
  c.stem = stem;
  c.image_size = image_size;
  return c;
}

// A small one: 16x16 images, batch 2.
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
