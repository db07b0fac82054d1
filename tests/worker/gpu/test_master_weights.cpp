// ZeRO-1's sharded master weights (worker/gpu/master_weights.h) on their own: which values each
// view holds after an import of the whole weights, what an export writes (the owned ranges and
// nothing else), and the ranges each refuses. Copies and casts only: compared exactly.
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "tests/worker/gpu/gpu_test_util.h"
#include "worker/gpu/check.h"
#include "worker/gpu/device.h"
#include "worker/gpu/master_weights.h"
#include "worker/gpu/pool.h"

using namespace gputest;
using worker::gpu::MasterWeights;

namespace {

std::vector<float> download(const float* d, size_t n) {
  std::vector<float> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

TEST_CASE("sharded master weights: import, the views, export", "[gpu]") {
  constexpr size_t n = 1000;
  worker::gpu::DevicePool pool(size_t(16) << 20);
  worker::gpu::Device dev(0, pool);
  MasterWeights w(DType::BF16, pool, dev, nullptr);
  w.bind(nullptr, n);
  // Owned: [100, 300) and [500, 550); read in fp32: two neighbours (one batch norm's weight and
  // bias: one copy run) and [900, 920).
  const std::vector<ParamView> owned{{100, 200}, {500, 50}};
  w.shard(owned, {{0, 10}, {10, 10}, {900, 20}});
  CHECK(w.sharded());
  CHECK(w.master_bytes() == 250 * sizeof(float));
  CHECK(w.copies_bytes() == 40 * sizeof(float) + 2 * sizeof(worker::gpu::CopyRun));
  CHECK_THROWS_WITH(w.shard(owned, {}), Catch::Contains("once"));

  const std::vector<float> whole = randn(n, 7);
  float* d_whole = static_cast<float*>(pool.alloc(n * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(d_whole, whole.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  w.import_master(d_whole);
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));

  auto same = [&](const std::vector<float>& got, size_t from) {
    return std::memcmp(got.data(), whole.data() + from, got.size() * sizeof(float)) == 0;
  };
  CHECK(same(download(w.f32({0, 10}), 10), 0));
  CHECK(same(download(w.f32({10, 10}), 10), 10));
  CHECK(same(download(w.f32({900, 20}), 20), 900));
  CHECK_THROWS_WITH(w.f32({20, 5}), Catch::Contains("no fp32 copy"));
  CHECK(same(download(w.master_of({100, 200}), 200), 100));
  CHECK(same(download(w.master_of({500, 50}), 50), 500));
  CHECK_THROWS_WITH(w.master_of({100, 201}), Catch::Contains("not an owned range"));
  CHECK_THROWS_WITH(w.master_of({0, 5}), Catch::Contains("not an owned range"));
  // The shadow: the whole weights in bf16.
  std::vector<uint16_t> shadow(n);
  CUDA_CHECK(cudaMemcpy(shadow.data(), w.weight({0, n}), n * 2, cudaMemcpyDeviceToHost));
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) off += bf16_to_f32(shadow[i]) != round_to(DType::BF16, whole[i]);
  CHECK(off == 0);

  // An export writes the owned ranges only.
  float* d_out = static_cast<float*>(pool.alloc(n * sizeof(float)));
  const std::vector<float> before(n, -1.f);
  CUDA_CHECK(cudaMemcpy(d_out, before.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  w.export_master(d_out, {500, 50});
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  std::vector<float> out = download(d_out, n);
  CHECK(std::memcmp(out.data() + 500, whole.data() + 500, 50 * sizeof(float)) == 0);
  CHECK(out[100] == -1.f);
  CHECK_THROWS_WITH(w.export_master(d_out, {500, 49}), Catch::Contains("not an owned range"));
  w.export_master(d_out, {});
  CUDA_CHECK(cudaStreamSynchronize(dev.stream));
  out = download(d_out, n);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool own = (i >= 100 && i < 300) || (i >= 500 && i < 550);
    wrong += own ? std::memcmp(&out[i], &whole[i], sizeof(float)) != 0 : out[i] != -1.f;
  }
  CHECK(wrong == 0);
}

TEST_CASE("master weights: what bind and shard refuse", "[gpu]") {
  worker::gpu::DevicePool pool(size_t(1) << 20);
  worker::gpu::Device dev(0, pool);
  MasterWeights f32(DType::F32, pool, dev, nullptr);
  CHECK_THROWS_WITH(f32.bind(nullptr, 10), Catch::Contains("cannot be left unbound"));
  MasterWeights bf16(DType::BF16, pool, dev, nullptr);
  CHECK_THROWS_WITH(bf16.weight({0, 1}), Catch::Contains("before bind_params"));
  bf16.bind(nullptr, 10);
  CHECK_THROWS_WITH(bf16.shard({{5, 6}}, {}), Catch::Contains("a range leaves the buffer"));
  CHECK_THROWS_WITH(bf16.import_master(nullptr), Catch::Contains("without sharded master weights"));
  CHECK_THROWS_WITH(bf16.params_updated(), Catch::Contains("import_master() brings updates in"));
}
