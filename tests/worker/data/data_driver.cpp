// Driver for the Python checks of the image pipeline (check_data.py): runs one piece of
// worker/data on the files it is given and writes what came out as safetensors or text.
//   data_driver decode SCALE OUT FILE...         tensor i (U8, h x w x 3): file i at SCALE/8
//   data_driver render OUT JOB...                tensor i (F32, SIZE x SIZE x 3): job i, which is
//       FILE|SIZE|DCT|TOP|LEFT|H|W|FLIP (that box) or FILE|SIZE|DCT|eval (the evaluation transform),
//       or pad-crop's FILE|SIZE|padcrop|PAD|TOP|LEFT|FLIP (the crop at TOP, LEFT of the padded
//       image) and FILE|SIZE|padcrop|PAD|eval (its CenterCrop); metadata scale_num_i: the DCT scale used
//   data_driver plan W H SEED EPOCH INDEX SIZE [PAD COUNT]  the training plan drawn for that sample
//       (text; with PAD pad-crop's for samples INDEX .. INDEX + COUNT - 1: window top, left, flip per line)
//   data_driver index DIR                        "label<TAB>relative path" lines, then "classes ..."
//   data_driver index-time DIR SPLIT             seconds to scan DIR/SPLIT, then to load its cache
//   data_driver shard N WORLD ACCUM BATCH SEED EPOCH   the sampler's batches (JSON)
//   data_driver batch DIR SPLIT SIZE THREADS SEED EPOCH OUT I,J,...  one micro-batch of the CPU source
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "worker/core/backend.h"
#include "worker/model/safetensors.h"
#include "worker/data/dataset_cache.h"
#include "worker/data/decode.h"
#include "worker/data/image_source.h"
#include "worker/data/open_image_source.h"
#include "worker/data/transform.h"
#include "worker/train/sampler.h"

using namespace worker;

namespace {

std::vector<uint8_t> slurp(const std::string& path) {
  std::vector<uint8_t> b;
  std::string err;
  if (!read_image_file(path, kDefaultMaxImageBytes, &b, &err)) throw std::runtime_error(path + ": " + err);
  return b;
}

StTensor tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape, const void* p,
                size_t bytes) {
  StTensor t{name, dtype, std::move(shape), std::vector<uint8_t>(bytes)};
  std::memcpy(t.data.data(), p, bytes);
  return t;
}

int run(int argc, char** argv) {
  const std::vector<std::string> a(argv + 1, argv + argc);
  if (a.empty()) throw std::runtime_error("usage: see the header of data_driver.cpp");
  if (a[0] == "decode" && a.size() >= 4) {
    const int scale = std::stoi(a[1]);
    std::vector<StTensor> out;
    for (size_t i = 3; i < a.size(); ++i) {
      const auto file = slurp(a[i]);
      const ImageHeader h = read_header(file.data(), file.size());
      RgbRegion r;
      decode_region(file.data(), file.size(), scale,
                    Region{0, 0, scaled_size(h.width, scale), scaled_size(h.height, scale)}, &r);
      out.push_back(tensor(std::to_string(i - 3), "U8", {r.h, r.w, 3}, r.pixels.data(), r.pixels.size()));
    }
    write_safetensors(a[2], out);
    return 0;
  }
  if (a[0] == "render" && a.size() >= 3) {
    std::vector<StTensor> out;
    std::map<std::string, std::string> meta;
    for (size_t j = 2; j < a.size(); ++j) {
      std::vector<std::string> f;
      std::stringstream ss(a[j]);
      for (std::string t; std::getline(ss, t, '|');) f.push_back(t);
      if (f.size() != 8 && f.size() != 4 && !(f.size() >= 5 && f[2] == "padcrop"))
        throw std::runtime_error("bad render job '" + a[j] + "'");
      const auto file = slurp(f[0]);
      const ImageHeader h = read_header(file.data(), file.size());
      TransformConfig tf;
      tf.size = std::stoi(f[1]);
      tf.dct_scaling = f[2] == "on";
      SamplePlan p;
      if (f[2] == "padcrop") {
        tf.augment = Augment::PadCrop;
        tf.padding = std::stoi(f[3]);
        p = f[4] == "eval" ? plan_eval(h.width, h.height, tf)
                           : plan_pad_crop(h.width, h.height, tf, std::stoi(f[4]), std::stoi(f[5]), f.at(6) == "1");
      } else if (f.size() == 4) {
        p = plan_eval(h.width, h.height, tf);
      } else {
        p.box_y0 = std::stoi(f[3]);
        p.box_x0 = std::stoi(f[4]);
        p.box_y1 = p.box_y0 + std::stoi(f[5]);
        p.box_x1 = p.box_x0 + std::stoi(f[6]);
        p.flip = f[7] == "1";
        p.out_w = p.out_h = p.size = tf.size;
      }
      const Geometry g = plan_geometry(p, h.format, h.width, h.height, tf.dct_scaling);
      RgbRegion r;
      decode_region(file.data(), file.size(), g.scale_num, g.region, &r);
      std::vector<float> img(size_t(tf.size) * size_t(tf.size) * 3);
      RenderScratch scratch;
      render(r, g, p, tf, DType::F32, img.data(), &scratch);
      const std::string name = std::to_string(j - 2);
      out.push_back(tensor(name, "F32", {tf.size, tf.size, 3}, img.data(), img.size() * 4));
      meta["scale_num_" + name] = std::to_string(g.scale_num);
    }
    write_safetensors(a[1], out, meta);
    return 0;
  }
  if (a[0] == "plan" && a.size() == 9) {
    TransformConfig tf;
    tf.size = std::stoi(a[6]);
    tf.augment = Augment::PadCrop;
    tf.padding = std::stoi(a[7]);
    for (int64_t i = std::stoll(a[5]), end = i + std::stoll(a[8]); i < end; ++i) {
      const SamplePlan p = plan_train(std::stoi(a[1]), std::stoi(a[2]), tf, std::stoull(a[3]), std::stoll(a[4]), i);
      std::cout << p.win_y << " " << p.win_x << " " << int(p.flip) << "\n";
    }
    return 0;
  }
  if (a[0] == "plan" && a.size() == 7) {
    TransformConfig tf;
    tf.size = std::stoi(a[6]);
    const SamplePlan p = plan_train(std::stoi(a[1]), std::stoi(a[2]), tf, std::stoull(a[3]), std::stoll(a[4]), std::stoll(a[5]));
    std::cout << p.box_y0 << " " << p.box_x0 << " " << (p.box_y1 - p.box_y0) << " " << (p.box_x1 - p.box_x0) << " "
              << int(p.flip) << "\n";
    return 0;
  }
  if (a[0] == "index" && a.size() == 2) {
    const DatasetIndex idx = scan_image_folder(a[1]);
    for (int64_t i = 0; i < idx.size(); ++i) std::cout << idx.labels[size_t(i)] << "\t" << idx.rel_path(i) << "\n";
    std::cout << "classes";
    for (const auto& c : idx.classes) std::cout << "\t" << c;
    std::cout << "\n";
    return 0;
  }
  if (a[0] == "index-time" && a.size() == 3) {
    const std::string cache = a[1] + "/.train_resnet-index." + a[2];
    std::remove(cache.c_str());
    const IndexLoad scan = load_image_folder(a[1], a[2], {});
    const IndexLoad cached = load_image_folder(a[1], a[2], {});
    std::cout << "{\"images\": " << scan.index.size() << ", \"scan_s\": " << scan.seconds << ", \"cached_s\": "
              << cached.seconds << ", \"from_cache\": " << (cached.from_cache ? "true" : "false") << "}\n";
    return 0;
  }
  if (a[0] == "shard" && a.size() == 7) {
    SamplerConfig c;
    c.num_samples = std::stoll(a[1]);
    c.world = std::stoi(a[2]);
    c.accum = std::stoi(a[3]);
    c.batch = std::stoi(a[4]);
    c.seed = std::stoull(a[5]);
    Sampler s(c);
    const auto perm = s.permutation(std::stoll(a[6]));
    std::ostringstream o;
    o << "{\"perm\": [";
    for (size_t i = 0; i < perm.size(); ++i) o << (i ? "," : "") << perm[i];
    o << "], \"batches\": [";
    for (int r = 0; r < c.world; ++r) {
      o << (r ? "," : "") << "[";
      for (int64_t b = 0; b < s.steps_per_epoch(); ++b) {
        for (int k = 0; k < c.accum; ++k) {
          const auto idx = s.batch(perm, r, k, b);
          o << (b || k ? "," : "") << "[";
          for (size_t i = 0; i < idx.size(); ++i) o << (i ? "," : "") << idx[i];
          o << "]";
        }
      }
      o << "]";
    }
    o << "]}\n";
    std::cout << o.str();
    return 0;
  }
  if (a[0] == "batch" && a.size() == 9) {
    DataSourceOptions o;
    o.images.data = a[1];
    o.images.loader = Loader::Cpu;
    o.image_size = std::stoi(a[3]);
    o.images.read.threads = std::stoi(a[4]);
    o.seed = std::stoull(a[5]);
    BatchIndices idx;
    std::stringstream ss(a[8]);
    for (std::string t; std::getline(ss, t, ',');) idx.push_back(std::stoll(t));
    o.batch = int(idx.size());
    auto ops = make_cpu_ops(1);
    auto src = open_image_source(o, a[2] == "val" ? Split::Val : Split::Train, *ops);
    std::vector<float> images(idx.size() * size_t(o.image_size) * size_t(o.image_size) * 3);
    std::vector<int32_t> labels(idx.size());
    Act x{images.data(), DType::F32, int(idx.size()), o.image_size, o.image_size, 3};
    src->start(std::stoll(a[6]), {idx});
    const int n = src->next(x, labels.data(), nullptr);
    const int px = o.image_size;
    write_safetensors(a[7], {tensor("images", "F32", {n, px, px, 3}, images.data(), images.size() * 4),
                             tensor("labels", "I32", {n}, labels.data(), labels.size() * 4)},
                      {{"skipped", std::to_string(src->skipped())}});
    return 0;
  }
  throw std::runtime_error("unknown command or wrong argument count: " + a[0]);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "data_driver: " << e.what() << std::endl;
    return 1;
  }
}
