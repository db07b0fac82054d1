#include "worker/data/open_image_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "worker/core/knobs.h"
#include "worker/data/data_error.h"
#include "worker/data/dataset_cache.h"
#include "worker/data/decode.h"
#include "worker/data/image_source.h"
#include "worker/data/loader_choice.h"
#ifdef WORKER_HAVE_NVJPEG
#include "worker/data/gpu/gpu_image_source.h"
#endif

namespace worker {

namespace {

bool is_dir(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// A split held as class folders: root/name/<class>/<image>.
struct SplitFolder {
  std::string root, name;
  bool empty() const { return name.empty(); }
  std::string path() const { return root + "/" + name; }
};

// --val-data DIR, or the first of val/, validation/, test/ in an ImageFolder --data; else none.
SplitFolder val_folder(const DataSourceOptions& o) {
  if (!o.images.val_data.empty()) {
    if (!is_dir(o.images.val_data)) return {};
    std::string dir = o.images.val_data;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    const size_t slash = dir.rfind('/');
    if (slash == std::string::npos) return {".", dir};
    return {slash == 0 ? "/" : dir.substr(0, slash), dir.substr(slash + 1)};
  }
  if (!is_dir(o.images.data)) return {};
  for (const char* name : kValFolders)
    if (is_dir(o.images.data + "/" + name)) return {o.images.data, name};
  return {};
}

SplitFolder split_folder(const DataSourceOptions& o, Split split) {
  return split == Split::Train ? (is_dir(o.images.data) ? SplitFolder{o.images.data, "train"} : SplitFolder{}) : val_folder(o);
}

// The classes of a split's folder (through its cached index: the first look pays for the scan).
std::vector<std::string> classes_of(const DataSourceOptions& o, const SplitFolder& f) {
  return load_image_folder(f.root, f.name, default_cache_dirs(o.log_dir)).index.classes;
}

std::string plural(int n, const char* what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

std::string nice_note(int nice) { return nice > 0 ? " at nice +" + std::to_string(nice) + " (WORKER_DATA_NICE)" : ""; }

std::string list_names(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 5) s += ", ... (" + std::to_string(v.size()) + ")";
  return s;
}

void check_same_classes(const std::string& data, const std::string& val_name, const std::vector<std::string>& train,
                        const std::vector<std::string>& val) {
  if (train == val) return;
  std::vector<std::string> only_train, only_val;
  std::set_difference(train.begin(), train.end(), val.begin(), val.end(), std::back_inserter(only_train));
  std::set_difference(val.begin(), val.end(), train.begin(), train.end(), std::back_inserter(only_val));
  std::string msg = data + ": the classes of " + val_name + " differ from train/'s (labels would not match):";
  if (!only_train.empty()) msg += " missing in val: " + list_names(only_train) + ";";
  if (!only_val.empty()) msg += " only in val: " + list_names(only_val) + ";";
  throw DataError(msg + " make both hold the same class folders");
}

// The training images' sizes: measured at start-up (settle_options), or sampled here, once, where
// nothing measured them (--loader auto and the GPU loader's CPU share may both ask).
class TrainingSizes {
 public:
  explicit TrainingSizes(const DataSourceOptions& o) : o_(o), s_(o.images.sizes) {}
  const ImageSizeSample& get() {
    if (!s_) s_ = sample_image_sizes(o_, kImageSizeSample);
    return *s_;
  }

 private:
  const DataSourceOptions& o_;
  std::optional<ImageSizeSample> s_;
};

// --loader auto: the CPU loader where the backend is the CPU or nvJPEG is not built in; else the
// one choose_loader() finds faster for the training images' median size (the same choice for both
// splits), `why` saying so for the log.
Loader auto_loader(TrainingSizes& sizes, bool gpu, int threads, std::string* why) {
  if (!gpu || !nvjpeg_built()) return Loader::Cpu;
  const ImageSizeSample& s = sizes.get();
  if (s.sampled == 0) return Loader::Gpu;  // nothing readable in the sample: the loader names the files
  const LoaderChoice c = choose_loader(s.median_pixels, threads);
  std::ostringstream w;
  w.precision(0);
  w << std::fixed << " (--loader auto: images of median " << s.median_pixels << " px over " << s.sampled
    << " sampled, where " << plural(threads, "CPU thread") << " would decode about " << c.cpu_images_per_s
    << " images/s and nvJPEG about " << c.gpu_images_per_s << "; --loader " << (c.loader == Loader::Cpu ? "gpu" : "cpu")
    << " picks the other)";
  *why = w.str();
  return c.loader;
}

// The GPU loader's CPU share (loader_choice.h): the caller's, else WORKER_NVJPEG_CPU_SHARE's, else
// the cost model's for the training images' median size (0 where none could be read); `why` names
// where it came from, for the log.
double gpu_cpu_share(const DataSourceOptions& o, TrainingSizes& sizes, int threads, std::string* why) {
  if (o.images.read.gpu_cpu_share >= 0) {
    *why = "as asked";
    return o.images.read.gpu_cpu_share;
  }
  if (process_knobs().nvjpeg_cpu_share >= 0) {
    *why = "WORKER_NVJPEG_CPU_SHARE";
    return process_knobs().nvjpeg_cpu_share;
  }
  const ImageSizeSample& s = sizes.get();
  if (s.sampled == 0) return 0.0;
  *why = "what balances the two at the modelled rates for images of median " + std::to_string(s.median_pixels) + " px";
  return gpu_loader_cpu_share(choose_loader(s.median_pixels, threads));
}

}  // namespace

bool nvjpeg_built() {
#ifdef WORKER_HAVE_NVJPEG
  return true;
#else
  return false;
#endif
}

bool has_split(const DataSourceOptions& o, Split split) {
  if (split == Split::Train) return true;
  return !o.images.val_data.empty() || !val_folder(o).empty();
}

std::string val_split_name(const DataSourceOptions& o) {
  const SplitFolder f = val_folder(o);
  if (!f.empty()) return f.path();
  return o.images.val_data;
}

std::unique_ptr<BatchSource> open_image_source(const DataSourceOptions& o, Split split, Ops& ops) {
  struct stat st{};
  if (::stat(o.images.data.c_str(), &st) != 0) {
    throw DataError("--data " + o.images.data + ": no such file or folder (give an ImageFolder folder with train/<class>/ "
                    "inside, a list file of `path label` lines, random or learnable)");
  }
  auto index = std::make_shared<DatasetIndex>();
  std::ostringstream what;
  const SplitFolder folder = split_folder(o, split);
  if (S_ISDIR(st.st_mode) && split == Split::Train && !is_dir(o.images.data + "/train")) {
    throw DataError("--data " + o.images.data + " has no train/ folder (expected " + o.images.data +
                    "/train/<class>/<image>, as torchvision's ImageFolder)");
  }
  if (!o.images.val_data.empty() && split == Split::Val && ::stat(o.images.val_data.c_str(), &st) != 0) {
    throw DataError("--val-data " + o.images.val_data + ": no such file or folder (give a folder of class folders, "
                    "<class>/<image>, or a list file of `path label` lines)");
  }
  if (!folder.empty()) {
    IndexLoad l = load_image_folder(folder.root, folder.name, default_cache_dirs(o.log_dir));
    *index = std::move(l.index);
    // Train and val folders must hold the same classes, or the labels mean other things.
    const SplitFolder other = split_folder(o, split == Split::Train ? Split::Val : Split::Train);
    if (!other.empty()) {
      const std::vector<std::string> oc = classes_of(o, other);
      const std::string val_name = (split == Split::Train ? other : folder).name + "/";
      if (split == Split::Train) check_same_classes(o.images.data, val_name, index->classes, oc);
      else check_same_classes(o.images.data, val_name, oc, index->classes);
    }
    what << "ImageFolder " << index->root << ": " << index->size() << " images, " << index->num_classes << " classes ("
         << (l.from_cache ? "index from " + l.cache_path : "scanned, " + (l.cache_path.empty() ? std::string("not cached") : "cached in " + l.cache_path))
         << ", " << std::fixed;
    what.precision(2);
    what << l.seconds << " s)";
  } else {
    const std::string list = split == Split::Train ? o.images.data : o.images.val_data;
    if (list.empty()) throw DataError("--data " + o.images.data + " is a list file: the val split needs --val-data LISTFILE");
    *index = read_list_file(list);
    what << "list " << list << ": " << index->size() << " images, " << index->num_classes << " classes";
  }

  SplitInfo info;
  info.size = index->size();
  info.num_classes = index->num_classes;
  if (o.num_classes > 0) {
    if (o.num_classes < index->num_classes) {
      throw DataError("--num-classes " + std::to_string(o.num_classes) + " is fewer than the " +
                      std::to_string(index->num_classes) + " classes of --data " + o.images.data +
                      " (leave --num-classes out to use the data's)");
    }
    info.num_classes = o.num_classes;
  }
  info.class_names = index->classes;

  LoaderConfig cfg{split, o.batch, o.seed, o.images.read, o.images.tf};
  if (cfg.read.threads <= 0) cfg.read.threads = default_data_threads(o.local_ranks);
  cfg.tf.size = o.image_size;

  const bool gpu = ops.device() == DeviceKind::Gpu;
  if (cfg.read.nice < 0) cfg.read.nice = process_knobs().data_nice >= 0 ? process_knobs().data_nice : gpu ? kGpuDataNice : 0;
  Loader loader = o.images.loader;
  std::string auto_why;  // --loader auto's reason, where it weighed both loaders
  TrainingSizes sizes(o);
  if (loader == Loader::Auto) loader = auto_loader(sizes, gpu, cfg.read.threads, &auto_why);
  if (loader == Loader::Gpu) {
    if (!gpu) throw DataError("--loader gpu needs the GPU backend (this run computes on the CPU; use --loader cpu)");
#ifdef WORKER_HAVE_NVJPEG
    std::string share_why;
    cfg.read.gpu_cpu_share = gpu_cpu_share(o, sizes, cfg.read.threads, &share_why);
    what << "; GPU decode (nvJPEG), " << plural(cfg.read.threads, "reader thread") << nice_note(cfg.read.nice);
    if (cfg.read.gpu_cpu_share > 0) {
      what << ", which decode " << int(cfg.read.gpu_cpu_share * 100 + 0.5) << " % of each batch on the CPU ("
           << share_why << "; WORKER_NVJPEG_CPU_SHARE=0: none)";
    }
    what << auto_why << "; " << transform_description(cfg);
    return make_gpu_image_source(index, info, cfg, ops, what.str());
#else
    throw DataError("--loader gpu: this train_resnet was built without nvJPEG (scripts/setup.sh fetches the "
                    "nvidia-nvjpeg wheel; reconfigure), use --loader cpu");
#endif
  }
  what << "; CPU decode (libjpeg-turbo, libpng), " << plural(cfg.read.threads, "thread") << nice_note(cfg.read.nice);
  if (o.images.tf.dct_scaling) what << ", DCT scaling";
  what << auto_why << "; " << transform_description(cfg);
  if (gpu && !nvjpeg_built() && o.images.loader == Loader::Auto) what << " (nvJPEG not built in)";
  return make_cpu_image_source(index, info, cfg, ops, what.str());
}

ImageSizeSample sample_image_sizes(const DataSourceOptions& o, int count) {
  struct stat st{};
  if (::stat(o.images.data.c_str(), &st) != 0) throw DataError("--data " + o.images.data + ": no such file or folder");
  const DatasetIndex index = is_dir(o.images.data) ? load_image_folder(o.images.data, "train", default_cache_dirs(o.log_dir)).index
                                            : read_list_file(o.images.data);
  std::vector<int> sides;
  std::vector<int64_t> pixels;
  const int64_t n = index.size();
  std::vector<uint8_t> head;
  std::string err;
  for (int64_t k = 0; k < count && k < n; ++k) {
    // As the loader reads it (a FIFO, a device or a giant is passed over unread), its first 256 KiB:
    // a JPEG's frame header follows its EXIF data. Unreadable: the loader will say so when it meets it.
    if (!read_image_file(index.path(k * n / std::min<int64_t>(count, n)), o.images.read.max_image_bytes, &head, &err,
                         size_t(256) << 10)) {
      continue;
    }
    try {
      const ImageHeader h = read_header(head.data(), head.size());
      sides.push_back(std::min(h.width, h.height));
      pixels.push_back(int64_t(h.width) * h.height);
    } catch (const std::exception&) {
    }
  }
  ImageSizeSample s;
  s.sampled = int(sides.size());
  if (sides.empty()) return s;
  std::sort(sides.begin(), sides.end());
  std::sort(pixels.begin(), pixels.end());
  s.median_short = sides[sides.size() / 2];
  s.median_pixels = pixels[pixels.size() / 2];
  s.min_short = sides.front();
  s.max_short = sides.back();
  return s;
}

}  // namespace worker
