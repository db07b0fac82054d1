#include "worker/train/architecture.h"

#include <cstdio>
#include <stdexcept>

#include "worker/model/safetensors.h"

namespace worker {

namespace {

const char* stem_name(Stem s) { return s == Stem::Cifar ? "cifar" : "imagenet"; }

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

std::map<std::string, std::string> architecture_metadata(const ModelConfig& c) {
  return {{"depth", std::to_string(c.depth)},
          {"width", std::to_string(c.width)},
          {"stem", stem_name(c.stem)},
          {"num_classes", std::to_string(c.num_classes)},
          {"image_size", std::to_string(c.image_size)},
          {"label_smoothing", number_text(double(c.label_smoothing))}};
}

std::map<std::string, std::string> eval_transform_metadata(bool native_scale) {
  return {{"eval_transform", native_scale ? "center-crop" : "resize-center-crop"}};
}

std::optional<Architecture> read_architecture(const std::string& path) {
  std::map<std::string, std::string> meta;
  read_safetensors(path, &meta);
  if (!meta.count("depth")) return std::nullopt;
  auto bad = [&](const std::string& key) {
    return std::runtime_error("checkpoint '" + path + "': metadata '" + key + "'='" + meta[key] + "' is not valid");
  };
  auto integer = [&](const std::string& key) {
    const std::string& v = meta[key];
    size_t used = 0;
    int x = 0;
    try {
      x = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (v.empty() || used != v.size() || x < 1) throw bad(key);
    return x;
  };
  Architecture a;
  a.depth = integer("depth");
  if (meta.count("width")) a.width = integer("width");
  if (meta.count("num_classes")) a.num_classes = integer("num_classes");
  if (meta.count("image_size")) a.image_size = integer("image_size");
  if (meta.count("stem")) {
    if (meta["stem"] == "cifar") a.stem = Stem::Cifar;
    else if (meta["stem"] != "imagenet") throw bad("stem");
  }
  if (meta.count("label_smoothing")) {
    char* end = nullptr;
    a.label_smoothing = std::strtod(meta["label_smoothing"].c_str(), &end);
    if (meta["label_smoothing"].empty() || *end || !(a.label_smoothing >= 0 && a.label_smoothing < 1))
      throw bad("label_smoothing");
  }
  if (meta.count("eval_transform")) {
    if (meta["eval_transform"] == "center-crop") a.native_scale_eval = true;
    else if (meta["eval_transform"] != "resize-center-crop") throw bad("eval_transform");
  }
  return a;
}

}  // namespace worker
