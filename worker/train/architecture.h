// The model a weights file holds, in its safetensors metadata (issue 25): written with every
// checkpoint (write_weights), read back by --eval-only so that the architecture need not be
// repeated on its command line. One place for the keys and their parsing.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "worker/model/model.h"

namespace worker {

struct Architecture {
  int depth = 50, width = 64, num_classes = 1000, image_size = 224;
  Stem stem = Stem::ImageNet;
  double label_smoothing = 0.0;  // of the training loss, which validation reports
  bool native_scale_eval = false;  // validated with CenterCrop at the images' own scale (--augment pad-crop)
};

// The metadata entries ("depth", "width", "stem", "num_classes", "image_size", "label_smoothing").
std::map<std::string, std::string> architecture_metadata(const ModelConfig& c);
// The evaluation transform's entry ("eval_transform": "center-crop" after --augment pad-crop, else
// "resize-center-crop"), which the trainer adds to what it saves.
std::map<std::string, std::string> eval_transform_metadata(bool native_scale);
// The architecture a file's metadata records; nullopt when it records none (a file exported from
// torchvision, or written before issue 25). Throws std::runtime_error naming the file and the key
// for a value that is not valid.
std::optional<Architecture> read_architecture(const std::string& path);

}  // namespace worker
