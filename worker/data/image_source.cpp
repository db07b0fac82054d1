#include "worker/data/image_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <new>
#include <sstream>

#include "worker/core/host.h"
#include "worker/data/data_error.h"
#include "worker/data/decode.h"
#include "worker/data/prefetcher.h"

namespace worker {

int default_data_threads(int local_ranks) {
  return std::max(1, process_cores() / std::max(1, local_ranks));
}

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a folder";
  return "not a regular file";
}

// Reads exactly n bytes at the file's current offset; false (with `err`) when it cannot.
bool read_exactly(int fd, uint8_t* p, size_t n, std::string* err) {
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      *err = r < 0 ? std::strerror(errno) : "file shrank while being read";
      return false;
    }
    got += size_t(r);
  }
  return true;
}

}  // namespace

bool read_image_file(const std::string& path, uint64_t max_bytes, std::vector<uint8_t>* buf, std::string* err,
                     size_t prefix) {
  buf->clear();  // nothing of the previous file is left to be mistaken for this one's
  // O_NONBLOCK: opening a FIFO would otherwise wait for a writer, forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    const int e = errno;
    struct stat st{};
    // A socket cannot be opened at all (ENXIO): say what it is rather than "no such device".
    *err = ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) ? std::string(file_kind(st.st_mode)) + ", not an image file"
                                                                   : std::strerror(e);
    return false;
  }
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } close_at_end{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    *err = std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st.st_mode)) {
    *err = std::string(file_kind(st.st_mode)) + ", not an image file";
    return false;
  }
  const uint64_t size = uint64_t(st.st_size);
  if (size == 0) {
    *err = "empty file";
    return false;
  }
  // The format from the first bytes, then the size: both before the rest is read (or memory
  // taken for it).
  uint8_t head[8];
  const size_t n_head = size_t(std::min<uint64_t>(size, sizeof head));
  if (!read_exactly(fd, head, n_head, err)) return false;
  if (sniff_format(head, n_head) == ImageFormat::Other) {
    *err = "not a JPEG or PNG image (from its first bytes; the other " + std::to_string(size - n_head) +
           " not read)";
    return false;
  }
  if (size > max_bytes) {
    *err = std::to_string(size) + " bytes, more than --max-image-bytes " + std::to_string(max_bytes) +
           " (not read)";
    return false;
  }
  const size_t want = prefix > 0 ? size_t(std::min<uint64_t>(size, std::max(prefix, n_head))) : size_t(size);
  try {
    buf->resize(want);
  } catch (const std::bad_alloc&) {
    *err = "out of memory reading its " + std::to_string(size) + " bytes";
    return false;
  }
  std::memcpy(buf->data(), head, n_head);
  return read_exactly(fd, buf->data() + n_head, want - n_head, err);
}

void BadFiles::report(const std::string& path, const std::string& reason) {
  if (strict_) throw DataError(path + ": " + reason + " (--strict-data; without it the file is skipped and counted)");
  count_.fetch_add(1);
  std::lock_guard<std::mutex> lk(mu_);
  if (warned_.insert(path).second) {
    std::cerr << "train_resnet: warning: skipping " << path << ": " << reason << " (" << what_
              << "; counted in the final summary, --strict-data makes it an error)" << std::endl;
  }
}

std::string out_of_memory_reason(const std::vector<uint8_t>& file) {
  std::string size;
  try {
    const ImageHeader h = read_header(file.data(), file.size());
    size = " (" + std::to_string(h.width) + "x" + std::to_string(h.height) + ")";
  } catch (const std::exception&) {
  }
  return "out of memory decoding it" + size;
}

std::vector<int> substitutes(const std::vector<uint8_t>& bad, const std::string& first_error) {
  const int n = int(bad.size());
  std::vector<int> sub(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    sub[size_t(i)] = i;
    if (!bad[size_t(i)]) continue;
    int j = (i + 1) % n;
    while (j != i && bad[size_t(j)]) j = (j + 1) % n;
    if (j == i) throw DataError("every image of a micro-batch failed to decode (e.g. " + first_error + ")");
    sub[size_t(i)] = j;
  }
  return sub;
}

std::string transform_description(const LoaderConfig& cfg) {
  const TransformConfig& t = cfg.tf;
  std::ostringstream s;
  s.precision(3);
  if (cfg.split == Split::Train && t.augment == Augment::Standard) {
    s << "RandomResizedCrop(" << t.size << ", scale=(" << t.scale_min << ", " << t.scale_max << ")) + flip p=" << t.hflip;
  } else if (cfg.split == Split::Train && t.augment == Augment::PadCrop) {
    s << "RandomCrop(" << t.size << ", padding=" << t.padding << ", pad_if_needed=True) + flip p=" << t.hflip;
  } else if (t.augment == Augment::PadCrop) {
    s << "CenterCrop(" << t.size << ")";
  } else {
    s << "Resize(" << t.resize_size() << ") + CenterCrop(" << t.size << ")";
  }
  return s.str();
}

namespace {

class CpuImageSource final : public BatchSource {
 public:
  CpuImageSource(std::shared_ptr<const DatasetIndex> index, SplitInfo info, const LoaderConfig& cfg, Ops& ops,
                 std::string describe)
      : index_(std::move(index)),
        info_(std::move(info)),
        cfg_(cfg),
        ops_(ops),
        dtype_(ops.compute_dtype()),
        describe_(std::move(describe)),
        bad_(cfg.read.strict, "unreadable image") {
    image_bytes_ = size_t(cfg.tf.size) * size_t(cfg.tf.size) * 3 * dtype_size(dtype_);
    slots_.resize(size_t(cfg.read.prefetch));
    for (auto& s : slots_) {
      s.images.resize(image_bytes_ * size_t(cfg.batch));
      s.labels.resize(size_t(cfg.batch));
      s.bad.resize(size_t(cfg.batch));
      s.errors.resize(size_t(cfg.batch));
    }
    scratch_.resize(size_t(cfg.read.threads));
    pool_ = std::make_unique<Prefetcher>(cfg.read.threads, cfg.read.prefetch,
                                         [this](int slot, int pos, int64_t sample, int64_t epoch, int thread) {
                                           work(slot, pos, sample, epoch, thread);
                                         },
                                         std::max(0, cfg.read.nice));
  }

  const SplitInfo& info() const override { return info_; }
  std::string describe() const override { return describe_; }
  int64_t skipped() const override { return bad_.count(); }

  void start(int64_t epoch, std::vector<BatchIndices> order) override {
    check_sizes(order);
    pool_->start(epoch, std::move(order));
  }

  void follow(int64_t epoch, std::vector<BatchIndices> order) override {
    check_sizes(order);
    pool_->follow(epoch, std::move(order));
  }

  int next(Act& images, int32_t* labels, double* wait_ms) override {
    const int slot = pool_->take(wait_ms);
    if (slot < 0) throw std::logic_error("image source: next() past the end of the pass");
    Slot& s = slots_[size_t(slot)];
    const int n = int(pool_->batch(pool_->current()).size());
    std::vector<uint8_t> bad(s.bad.begin(), s.bad.begin() + n);
    std::string first;
    for (int i = 0; i < n && first.empty(); ++i) first = s.errors[size_t(i)];
    const std::vector<int> sub = substitutes(bad, first);
    for (int i = 0; i < n; ++i) {
      if (sub[size_t(i)] == i) continue;
      std::memcpy(s.images.data() + size_t(i) * image_bytes_, s.images.data() + size_t(sub[size_t(i)]) * image_bytes_,
                  image_bytes_);
      s.labels[size_t(i)] = s.labels[size_t(sub[size_t(i)])];
    }
    if (images.dtype != dtype_ || size_t(images.h) * size_t(images.w) * size_t(images.c) * dtype_size(dtype_) != image_bytes_) {
      throw std::logic_error("image source: the model's input does not match --image-size");
    }
    ops_.upload(images.data, s.images.data(), size_t(n) * image_bytes_);
    ops_.upload(labels, s.labels.data(), size_t(n) * sizeof(int32_t));
    pool_->release();
    return n;
  }

 private:
  struct Slot {
    std::vector<uint8_t> images;  // batch x size x size x 3, compute dtype
    std::vector<int32_t> labels;
    std::vector<uint8_t> bad;
    std::vector<std::string> errors;
  };
  struct Scratch {
    std::vector<uint8_t> file;
    RgbRegion region;
    RenderScratch render_scratch;
  };

  void check_sizes(const std::vector<BatchIndices>& order) const {
    for (const auto& b : order) {
      if (int(b.size()) > cfg_.batch) throw std::invalid_argument("image source: a micro-batch larger than --batch-size");
    }
  }

  void work(int slot, int pos, int64_t sample, int64_t epoch, int thread) {
    Slot& s = slots_[size_t(slot)];
    Scratch& sc = scratch_[size_t(thread)];
    const std::string path = index_->path(sample);
    s.labels[size_t(pos)] = index_->labels[size_t(sample)];
    s.bad[size_t(pos)] = 0;
    s.errors[size_t(pos)].clear();
    std::string err;
    try {
      if (!read_image_file(path, cfg_.read.max_image_bytes, &sc.file, &err)) throw DecodeError("cannot read: " + err);
      const ImageHeader h = read_header(sc.file.data(), sc.file.size());
      const SamplePlan p = cfg_.split == Split::Train ? plan_train(h.width, h.height, cfg_.tf, cfg_.seed, epoch, sample)
                                                      : plan_eval(h.width, h.height, cfg_.tf);
      const Geometry g = plan_geometry(p, h.format, h.width, h.height, cfg_.tf.dct_scaling);
      decode_region(sc.file.data(), sc.file.size(), g.scale_num, g.region, &sc.region);
      render(sc.region, g, p, cfg_.tf, dtype_, s.images.data() + size_t(pos) * image_bytes_, &sc.render_scratch);
      return;
    } catch (const DecodeError& e) {
      err = e.what();
    } catch (const std::bad_alloc&) {  // an image too large for this machine's memory is a bad file too
      err = out_of_memory_reason(sc.file);
    }
    s.bad[size_t(pos)] = 1;
    s.errors[size_t(pos)] = path + ": " + err;
    bad_.report(path, err);  // throws when strict: take() rethrows it
  }

  std::shared_ptr<const DatasetIndex> index_;
  SplitInfo info_;
  LoaderConfig cfg_;
  Ops& ops_;
  DType dtype_;
  std::string describe_;
  BadFiles bad_;
  size_t image_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<Scratch> scratch_;
  std::unique_ptr<Prefetcher> pool_;  // last: its threads stop before the slots go
};

}  // namespace

std::unique_ptr<BatchSource> make_cpu_image_source(std::shared_ptr<const DatasetIndex> index, SplitInfo info,
                                                   const LoaderConfig& cfg, Ops& ops, std::string describe) {
  return std::make_unique<CpuImageSource>(std::move(index), std::move(info), cfg, ops, std::move(describe));
}

}  // namespace worker
