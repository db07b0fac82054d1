#include "worker/train/recipes.h"

namespace worker {

// Each recipe names every option its source sets that train_resnet has; what it leaves out keeps
// train_resnet's default (the guide's). The image size is left to the data in the guide's recipe
// (measured from the images with --data DIR, else 224); the ImageNet recipes fix it at their crop.
const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> all = {
      {"guide",
       "the paddle.distributed.launch guide's train_resnet.py (the defaults): ResNet-50, Adam 1e-3, constant rate, "
       "3 epochs",
       {{"--depth", "50"}, {"--width", "64"}, {"--stem", "imagenet"}, {"--augment", "standard"},
        {"--batch-size", "32"}, {"--epochs", "3"}, {"--optimizer", "adam"}, {"--lr", "0.001"},
        {"--lr-base-batch", "0"}, {"--lr-schedule", "constant"}, {"--warmup-epochs", "0"},
        {"--weight-decay", "0"}, {"--label-smoothing", "0"}}},
      // torchvision's references/classification train.py defaults, the recipe of ResNet50_Weights.IMAGENET1K_V1
      // (8 GPUs x 32: lr 0.1 for 256 images).
      {"torchvision",
       "torchvision's reference recipe (IMAGENET1K_V1): SGD 0.1 per 256 images, step decay x0.1 every 30 epochs, "
       "90 epochs",
       {{"--depth", "50"}, {"--width", "64"}, {"--stem", "imagenet"}, {"--image-size", "224"},
        {"--augment", "standard"}, {"--crop-scale", "0.08,1"}, {"--hflip", "0.5"}, {"--batch-size", "32"},
        {"--epochs", "90"}, {"--optimizer", "sgd"}, {"--momentum", "0.9"}, {"--lr", "0.1"},
        {"--lr-base-batch", "256"}, {"--weight-decay", "1e-4"}, {"--lr-schedule", "step"},
        {"--lr-steps", "30,60,90"}, {"--lr-gamma", "0.1"}, {"--warmup-epochs", "0"}, {"--label-smoothing", "0"}}},
      // NVIDIA DeepLearningExamples, PyTorch ResNet-50 v1.5, "Default configuration".
      {"nvidia",
       "NVIDIA's ResNet-50 v1.5 (DeepLearningExamples): SGD momentum 0.875, 0.256 per 256 images, cosine with "
       "warm-up, label smoothing 0.1, no weight decay on batch norm, 90 epochs",
       {{"--depth", "50"}, {"--width", "64"}, {"--stem", "imagenet"}, {"--image-size", "224"},
        {"--augment", "standard"}, {"--crop-scale", "0.08,1"}, {"--hflip", "0.5"}, {"--batch-size", "256"},
        {"--epochs", "90"}, {"--optimizer", "sgd"}, {"--momentum", "0.875"}, {"--lr", "0.256"},
        {"--lr-base-batch", "256"}, {"--weight-decay", "3.0517578125e-05"}, {"--no-wd-on-bn-bias", "true"},
        {"--lr-schedule", "cosine"}, {"--warmup-epochs", "5"}, {"--label-smoothing", "0.1"}}},
      // The CIFAR ResNets: He et al. 2016, section 4.2 (3x3 stem, 4-pixel padding + 32x32 crop + flip,
      // SGD momentum 0.9, lr 0.1 for batch 128, weight decay), with the cosine schedule and label
      // smoothing of current CIFAR recipes; width 32 keeps a CPU epoch short.
      {"small-images",
       "CIFAR-style ResNet-18 for images of about 32 px: 3x3 stem without max-pool, RandomCrop(32, padding=4) + flip, "
       "SGD Nesterov 0.1 per 128 images, cosine with 1 warm-up epoch, label smoothing 0.1, 30 epochs",
       {{"--depth", "18"}, {"--width", "32"}, {"--stem", "cifar"}, {"--image-size", "32"}, {"--augment", "pad-crop"},
        {"--crop-padding", "4"}, {"--hflip", "0.5"}, {"--batch-size", "128"}, {"--epochs", "30"},
        {"--optimizer", "sgd"}, {"--momentum", "0.9"}, {"--nesterov", "true"}, {"--lr", "0.1"},
        {"--lr-base-batch", "128"}, {"--weight-decay", "5e-4"}, {"--no-wd-on-bn-bias", "true"},
        {"--lr-schedule", "cosine"}, {"--warmup-epochs", "1"}, {"--label-smoothing", "0.1"}}},
  };
  return all;
}

const Recipe* find_recipe(const std::string& name) {
  for (const Recipe& r : recipes())
    if (name == r.name) return &r;
  return nullptr;
}

std::string recipe_names() {
  std::string s;
  const auto& all = recipes();
  for (size_t i = 0; i < all.size(); ++i) s += std::string(i == 0 ? "" : i + 1 == all.size() ? " or " : ", ") + all[i].name;
  return s;
}

std::vector<std::string> recipe_args(const Recipe& r) {
  std::vector<std::string> args;
  for (const auto& [opt, value] : r.options) {
    if (value == "true") {
      args.push_back(opt + "=true");
    } else {
      args.push_back(opt);
      args.push_back(value);
    }
  }
  return args;
}

std::string recipe_text(const Recipe& r) {
  std::string s;
  for (const auto& [opt, value] : r.options) s += (s.empty() ? "" : " ") + opt + (value == "true" ? "" : " " + value);
  return s;
}

}  // namespace worker
