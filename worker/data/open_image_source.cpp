#include "worker/data/open_image_source.h"

#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "worker/data/data_error.h"
#include "worker/data/dataset_cache.h"
#include "worker/data/image_source.h"
#ifdef WORKER_HAVE_NVJPEG
#include "worker/data/gpu_image_source.h"
#endif

namespace worker {

namespace {

bool is_dir(const std::string& p) {
  struct stat st{};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The classes of the other split (through its cached index: the first look pays for the scan).
std::vector<std::string> classes_of(const DataSourceOptions& o, const char* split) {
  return load_image_folder(o.data, split, default_cache_dirs(o.log_dir)).index.classes;
}

std::string list_names(const std::vector<std::string>& v) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 5) s += ", ... (" + std::to_string(v.size()) + ")";
  return s;
}

void check_same_classes(const std::string& data, const std::vector<std::string>& train,
                        const std::vector<std::string>& val) {
  if (train == val) return;
  std::vector<std::string> only_train, only_val;
  std::set_difference(train.begin(), train.end(), val.begin(), val.end(), std::back_inserter(only_train));
  std::set_difference(val.begin(), val.end(), train.begin(), train.end(), std::back_inserter(only_val));
  std::string msg = data + ": the classes of val/ differ from train/'s (labels would not match):";
  if (!only_train.empty()) msg += " missing in val: " + list_names(only_train) + ";";
  if (!only_val.empty()) msg += " only in val: " + list_names(only_val) + ";";
  throw DataError(msg + " make both hold the same class folders");
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
  return is_dir(o.data) ? is_dir(o.data + "/val") : !o.val_data.empty();
}

std::unique_ptr<BatchSource> open_image_source(const DataSourceOptions& o, Split split, Ops& ops) {
  const char* split_name = split == Split::Train ? "train" : "val";
  struct stat st{};
  if (::stat(o.data.c_str(), &st) != 0) {
    throw DataError("--data " + o.data + ": no such file or folder (give an ImageFolder folder with train/<class>/ "
                    "inside, a list file of `path label` lines, random or learnable)");
  }
  auto index = std::make_shared<DatasetIndex>();
  std::ostringstream what;
  if (S_ISDIR(st.st_mode)) {
    if (!is_dir(o.data + "/" + split_name)) {
      throw DataError("--data " + o.data + " has no " + split_name + "/ folder (expected " + o.data + "/" + split_name +
                      "/<class>/<image>, as torchvision's ImageFolder)");
    }
    IndexLoad l = load_image_folder(o.data, split_name, default_cache_dirs(o.log_dir));
    *index = std::move(l.index);
    // The other split must have the same classes, or its labels mean other things.
    const char* other = split == Split::Train ? "val" : "train";
    if (is_dir(o.data + "/" + other)) {
      const std::vector<std::string> oc = classes_of(o, other);
      if (split == Split::Train) check_same_classes(o.data, index->classes, oc);
      else check_same_classes(o.data, oc, index->classes);
    }
    what << "ImageFolder " << index->root << ": " << index->size() << " images, " << index->num_classes << " classes ("
         << (l.from_cache ? "index from " + l.cache_path : "scanned, " + (l.cache_path.empty() ? std::string("not cached") : "cached in " + l.cache_path))
         << ", " << std::fixed;
    what.precision(2);
    what << l.seconds << " s)";
  } else {
    const std::string list = split == Split::Train ? o.data : o.val_data;
    if (list.empty()) throw DataError("--data " + o.data + " is a list file: the val split needs --val-data LISTFILE");
    *index = read_list_file(list);
    what << "list " << list << ": " << index->size() << " images, " << index->num_classes << " classes";
  }

  SplitInfo info;
  info.size = index->size();
  info.num_classes = index->num_classes;
  if (o.num_classes > 0) {
    if (o.num_classes < index->num_classes) {
      throw DataError("--num-classes " + std::to_string(o.num_classes) + " is fewer than the " +
                      std::to_string(index->num_classes) + " classes of --data " + o.data +
                      " (leave --num-classes out to use the data's)");
    }
    info.num_classes = o.num_classes;
  }
  info.class_names = index->classes;

  LoaderConfig cfg;
  cfg.split = split;
  cfg.batch = o.batch;
  cfg.threads = o.threads > 0 ? o.threads : default_data_threads(o.local_ranks);
  cfg.prefetch = o.prefetch;
  cfg.strict = o.strict;
  cfg.max_image_bytes = o.max_image_bytes;
  cfg.seed = o.seed;
  cfg.tf = o.tf;

  const bool gpu = ops.device() == DeviceKind::Gpu;
  Loader loader = o.loader;
  if (loader == Loader::Auto) loader = gpu && nvjpeg_built() ? Loader::Gpu : Loader::Cpu;
  if (loader == Loader::Gpu) {
    if (!gpu) throw DataError("--loader gpu needs the GPU backend (this run computes on the CPU; use --loader cpu)");
#ifdef WORKER_HAVE_NVJPEG
    what << "; GPU decode (nvJPEG), " << cfg.threads << " reader threads; " << transform_description(cfg);
    return make_gpu_image_source(index, info, cfg, ops, what.str());
#else
    throw DataError("--loader gpu: this train_resnet was built without nvJPEG (scripts/setup.sh fetches the "
                    "nvidia-nvjpeg wheel; reconfigure), use --loader cpu");
#endif
  }
  what << "; CPU decode (libjpeg-turbo, libpng), " << cfg.threads << " threads";
  if (o.tf.dct_scaling) what << ", DCT scaling";
  what << "; " << transform_description(cfg);
  if (gpu && !nvjpeg_built() && o.loader == Loader::Auto) what << " (nvJPEG not built in)";
  return make_cpu_image_source(index, info, cfg, ops, what.str());
}

}  // namespace worker
