#include <catch2/catch.hpp>

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
  auto s = make_batch_source(o, Split::Train, *ops);
  REQUIRE(s);
  CHECK(s->info().size == 42);
  CHECK(s->info().num_classes == 3);
  CHECK(data_source_name(o) == "random");
  CHECK(make_batch_source(o, Split::Val, *ops) == nullptr);  // no --val-samples
}
