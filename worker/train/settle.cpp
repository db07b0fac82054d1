#include "worker/train/settle.h"

#include <algorithm>
#include <cstdio>

#include "worker/data/data_error.h"
#include "worker/data/open_image_source.h"
#include "worker/train/architecture.h"

namespace worker {

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// --eval-only: what the checkpoint records, for what the command line leaves out.
void take_architecture(TrainOptions& o, Settled& out) {
  const std::optional<Architecture> a = read_architecture(o.init);
  if (!a) {
    out.lines.push_back("Architecture: " + o.init +
                        " records none (not written by train_resnet): the command line's (--depth " +
                        std::to_string(o.depth) + " --width " + std::to_string(o.width) + " --stem " +
                        to_string(o.stem) + ")");
    return;
  }
  auto take = [&](const char* flag, auto& field, const auto& value, const std::string& text, bool must_agree) {
    if (!o.given.count(flag)) {
      field = value;
    } else if (must_agree && !(field == value)) {
      throw UsageError(std::string(flag) + " differs from the checkpoint " + o.init + ", which holds " + text +
                       ": leave " + flag + " out to evaluate the model it holds");
    }
  };
  take("--depth", o.depth, a->depth, "a ResNet-" + std::to_string(a->depth), true);
  take("--width", o.width, a->width, "width " + std::to_string(a->width), true);
  take("--stem", o.stem, a->stem, std::string("the ") + to_string(a->stem) + " stem", true);
  take("--num-classes", o.num_classes, a->num_classes, std::to_string(a->num_classes) + " classes", true);
  o.num_classes_given = true;  // the classifier's classes are the checkpoint's, not the data's
  take("--image-size", o.image_size, a->image_size, "", false);  // evaluating at another size is allowed
  take("--label-smoothing", o.label_smoothing, a->label_smoothing, "", false);
  // The evaluation transform of the training run's validation (pad-crop's is a centre crop at the
  // images' own scale); --augment given chooses its own.
  if (!o.given.count("--augment")) o.images.tf.augment = a->native_scale_eval ? Augment::PadCrop : Augment::Standard;
  o.given.insert({"--image-size", "--label-smoothing"});
  out.lines.push_back("Architecture from " + o.init + ": ResNet-" + std::to_string(o.depth) + ", width " +
                      std::to_string(o.width) + ", " + to_string(o.stem) + " stem, " + std::to_string(o.num_classes) +
                      " classes, " + std::to_string(o.image_size) + "x" + std::to_string(o.image_size) +
                      ", " + (o.images.tf.augment == Augment::PadCrop ? "CenterCrop" : "Resize + CenterCrop") +
                      "; loss with label smoothing " + fmt("%g", o.label_smoothing) +
                      (o.label_smoothing == a->label_smoothing ? " (the training run's)" : " (--label-smoothing)"));
}

}  // namespace

Settled settle_options(TrainOptions& o) {
  Settled out;
  if (o.eval_only && !o.init.empty()) take_architecture(o, out);
  if (o.data != DataSourceKind::Images) return out;
  DataSourceOptions d;
  d.images.data = o.images.data;  // only where the images are: the sample reads as the defaults allow
  ImageSizeSample s;
  try {
    s = sample_image_sizes(d, kImageSizeSample);
  } catch (const DataError&) {  // a missing or bad data set: the loader says what is wrong, later
    return out;
  }
  o.images.sizes = s;  // --loader auto reads it too
  if (s.sampled == 0) return out;  // nothing readable: the loader names the files
  const std::string measured = "median short side " + std::to_string(s.median_short) + " px (" +
                               std::to_string(s.min_short) + "-" + std::to_string(s.max_short) + " over " +
                               std::to_string(s.sampled) + " sampled training images)";
  if (!o.given_or_recipe("--image-size")) {
    o.image_size = std::clamp(s.median_short, 8, 224);
    out.lines.push_back("Image size: " + std::to_string(o.image_size) + " (" + measured +
                        (s.median_short > 224 ? ", at most 224" : "") + "; --image-size N sets another)");
  }
  if (o.image_size > 2 * s.median_short) {
    const double up = double(o.image_size) / s.median_short;
    out.warnings.push_back("--image-size " + std::to_string(o.image_size) + " is " + fmt("%.1f", up) +
                           "x the images' " + measured + ": each image is upscaled that much and a step costs " +
                           fmt("%.0f", up * up) + "x the pixels; use --image-size " +
                           std::to_string(std::max(8, s.median_short)) +
                           (s.median_short <= 64 ? " (or --recipe small-images)" : ""));
  }
  return out;
}

}  // namespace worker
