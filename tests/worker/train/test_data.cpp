#include <catch2/catch.hpp>

#include <png.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"
#include "worker/core/backend.h"
#include "worker/core/synthetic.h"
#include "worker/train/data.h"

using namespace worker;

TEST_CASE("synthetic source: the generator's samples, in the order it was given", "[train][data]") {
  auto ops = make_cpu_ops(1);
  const int size = 8, classes = 5, batch = 3;
  SyntheticSource train(DataKind::Learnable, 4, 100, 0, size, classes, *ops);
  SyntheticSource val(DataKind::Learnable, 4, 10, 100, size, classes, *ops);  // past the training set
  CHECK(train.info().size == 100);
  CHECK(val.info().num_classes == classes);
  std::vector<float> img(size_t(batch) * size * size * 3, -7.0f);
  std::vector<int32_t> lab(batch, -1);
  Act a{img.data(), DType::F32, batch, size, size, 3};
  train.start(0, {{5, 9, 2}, {7}});
  double wait = -1;
  CHECK(train.next(a, lab.data(), &wait) == 3);
  CHECK(wait >= 0);
  CHECK(lab[2] == synth::label(4, 2, classes));
  CHECK(img[size_t(size * size * 3) + 1] == synth::pixel(DataKind::Learnable, 4, 9, size, classes, 1));
  // A short micro-batch fills its samples and leaves the rest of the input as it was.
  const float untouched = img[size_t(size * size * 3)];
  CHECK(train.next(a, lab.data(), nullptr) == 1);
  CHECK(lab[0] == synth::label(4, 7, classes));
  CHECK(img[size_t(size * size * 3)] == untouched);
  CHECK_THROWS(train.next(a, lab.data(), nullptr));
  val.start(0, {{0}});
  val.next(a, lab.data(), nullptr);
  CHECK(lab[0] == synth::label(4, 100, classes));
  CHECK(img[0] == synth::pixel(DataKind::Learnable, 4, 100, size, classes, 0));
}

TEST_CASE("make_batch_source: a training source from the options", "[train][data]") {
  auto ops = make_cpu_ops(1);
  TrainOptions o;
  o.num_samples = 42;
  o.num_classes = 3;
  o.image_size = 8;
  auto s = make_batch_source(o, {}, Split::Train, *ops);
  REQUIRE(s);
  CHECK(s->info().size == 42);
  CHECK(s->info().num_classes == 3);
  CHECK(data_source_name(o) == "random");
  CHECK(make_batch_source(o, {}, Split::Val, *ops) == nullptr);  // no --val-samples
}

namespace {

using testing_support::TempDir;

void write_png(const std::string& path) {
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = img.height = 4;
  img.format = PNG_FORMAT_RGB;
  const std::vector<uint8_t> px(4 * 4 * 3, 128);
  REQUIRE(png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr));
}

int cores() {
  cpu_set_t set;
  return ::sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : int(std::thread::hardware_concurrency());
}

// Sets an environment variable for a scope, then puts back what was there.
struct ScopedEnv {
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

// The launcher's variables reach the image pipeline through WorkerEnv, read once (they used to be
// read with getenv deep in the loader, LOCAL_WORLD_SIZE only: under paddle's launcher, which sets
// PADDLE_LOCAL_SIZE, every rank took all the node's cores).
TEST_CASE("data_env: the node's ranks divide its cores, the log folder holds the index cache", "[train][data]") {
  const DataEnv paddle = data_env(read_worker_env({{"PADDLE_LOCAL_SIZE", "4"}, {"PADDLE_LOG_DIR", "/logs/j"}}));
  CHECK(paddle.local_ranks == 4);
  CHECK(paddle.log_dir == "/logs/j");
  CHECK(data_env(read_worker_env({{"LOCAL_WORLD_SIZE", "3"}})).local_ranks == 3);
  CHECK(data_env(read_worker_env({})).local_ranks == 1);
  CHECK(data_env(read_worker_env({})).log_dir.empty());

  TempDir d, logs, cache;
  const ScopedEnv xdg("XDG_CACHE_HOME", cache.path);
  for (const char* c : {"a", "b"}) {
    ::mkdir((d.path + "/train").c_str(), 0755);
    ::mkdir((d.path + "/train/" + c).c_str(), 0755);
    write_png(d.path + "/train/" + c + "/0.png");
  }
  auto ops = make_cpu_ops(1);
  TrainOptions o;
  o.data = DataSourceKind::Images;
  o.images.data = d.path;
  o.images.loader = Loader::Cpu;
  o.image_size = 8;
  o.batch_size = 1;
  auto threads_for = [&](int local_ranks) {
    const std::string what = make_batch_source(o, {local_ranks, ""}, Split::Train, *ops)->describe();
    INFO(what);
    const size_t at = what.find(" thread");  // "1 thread", "2 threads"
    REQUIRE(at != std::string::npos);
    return std::stoi(what.substr(what.rfind(' ', at - 1) + 1));
  };
  CHECK(threads_for(1) == cores());
  CHECK(threads_for(2) == std::max(1, cores() / 2));
  CHECK(threads_for(100000) == 1);
  o.images.read.threads = 3;  // --data-threads wins
  CHECK(threads_for(100000) == 3);

  // The index goes to the cache folder, nothing into the data's (issue 25), then to the log folder
  // when the cache folder cannot be written (a file in its place stops root too).
  const std::string beside = d.path + "/.train_resnet-index.train";
  CHECK(::access(beside.c_str(), F_OK) != 0);
  const std::string what = make_batch_source(o, {1, logs.path}, Split::Train, *ops)->describe();
  INFO(what);
  CHECK(what.find(" " + cache.path + "/train_resnet/train_resnet-index-") != std::string::npos);  // read back
  std::ofstream(cache.path + "/blocked") << "x";
  ::setenv("XDG_CACHE_HOME", (cache.path + "/blocked").c_str(), 1);
  const std::string in_logs = make_batch_source(o, {1, logs.path}, Split::Train, *ops)->describe();
  INFO(in_logs);
  CHECK(in_logs.find("cached in " + logs.path + "/train_resnet-index-") != std::string::npos);
  CHECK(::access(beside.c_str(), F_OK) != 0);
}
