// The CPU image source (worker/data/image_source.cpp) over a pass that was announced with follow():
// its batches are the ones a source started on that epoch alone gives, bit for bit, and the epoch
// matters to them (so a followed pass read with the wrong epoch's augmentation would fail here).
#include <catch2/catch.hpp>

#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "worker/core/backend.h"
#include "worker/data/open_image_source.h"

using namespace worker;
namespace fs = std::filesystem;

namespace {

void write_png(const std::string& path, int w, int h, std::mt19937& rng) {
  std::vector<uint8_t> px(size_t(w) * size_t(h) * 3);
  for (auto& v : px) v = uint8_t(rng() & 0xff);
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = uint32_t(w);
  img.height = uint32_t(h);
  img.format = PNG_FORMAT_RGB;
  REQUIRE(png_image_write_to_file(&img, path.c_str(), 0, px.data(), 0, nullptr) != 0);
}

// A folder of 2 classes x 12 images (40-70 px sides) in a fresh temporary directory.
std::string make_folder() {
  const fs::path root = fs::temp_directory_path() / ("test_image_source_" + std::to_string(::getpid()));
  fs::remove_all(root);
  std::mt19937 rng(11);
  for (int c = 0; c < 2; ++c) {
    const fs::path d = root / "train" / ("c" + std::to_string(c));
    fs::create_directories(d);
    for (int i = 0; i < 12; ++i) write_png((d / ("img" + std::to_string(i) + ".png")).string(), 40 + int(rng() % 31), 40 + int(rng() % 31), rng);
  }
  return root.string();
}

std::vector<BatchIndices> order_of(uint32_t seed) {
  std::vector<int64_t> perm(24);
  for (int i = 0; i < 24; ++i) perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  std::vector<BatchIndices> order;
  for (size_t b = 0; b < 24; b += 4) order.emplace_back(perm.begin() + ptrdiff_t(b), perm.begin() + ptrdiff_t(b + 4));
  return order;
}

constexpr int kSize = 32;

// Every batch of the pass: images (fp32) and labels, in order.
std::vector<float> read_pass(BatchSource& src, size_t batches, std::vector<int32_t>* labels) {
  const size_t per = size_t(4) * kSize * kSize * 3;
  std::vector<float> all(per * batches);
  labels->assign(4 * batches, -1);
  for (size_t b = 0; b < batches; ++b) {
    Act x{all.data() + b * per, DType::F32, 4, kSize, kSize, 3};
    REQUIRE(src.next(x, labels->data() + 4 * b, nullptr) == 4);
  }
  return all;
}

}  // namespace

TEST_CASE("image source: a followed pass gives the batches of that epoch started alone") {
  const std::string root = make_folder();
  DataSourceOptions o;
  o.images.data = root;
  o.images.loader = Loader::Cpu;
  o.images.read.threads = 3;
  o.images.read.prefetch = 2;
  o.image_size = kSize;
  o.batch = 4;
  o.seed = 5;
  auto ops = make_cpu_ops(1);
  const std::vector<BatchIndices> first = order_of(1), second = order_of(2);

  auto followed = open_image_source(o, Split::Train, *ops);
  followed->start(0, first);
  followed->follow(1, second);
  std::vector<int32_t> l0, l1, alone_l1, wrong_l;
  read_pass(*followed, first.size(), &l0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the threads read into the followed pass
  followed->start(1, second);
  const std::vector<float> got = read_pass(*followed, second.size(), &l1);

  auto alone = open_image_source(o, Split::Train, *ops);
  alone->start(1, second);
  const std::vector<float> want = read_pass(*alone, second.size(), &alone_l1);
  CHECK(l1 == alone_l1);
  CHECK(got == want);

  // The same samples with epoch 0's augmentation differ: the epoch reaches the followed items.
  auto wrong = open_image_source(o, Split::Train, *ops);
  wrong->start(0, second);
  CHECK(read_pass(*wrong, second.size(), &wrong_l) != want);
  CHECK(wrong_l == alone_l1);
  fs::remove_all(root);
}
