// The side stream of backward's weight gradients (worker/gpu/side_stream.h): its ordering rules
// on raw buffers, with the side stream held busy so that a missing wait would let the main
// stream's write land first and be overwritten; the shared cuDNN workspace's (workspace.h) the
// same way, the main stream held busy; then the whole model, whose in-place gradients
// and recomputation arena reuse memory the weight gradients still read, bit for bit against
// the one-stream run (cuDNN's deterministic algorithms, legacy plans: the same kernels).
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#include "tests/worker/gpu/gpu_test_util.h"
#include "worker/model/model.h"
#include "worker/gpu/check.h"
#include "worker/gpu/gpu_ops.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/pool.h"
#include "worker/gpu/side_stream.h"
#include "worker/gpu/workspace.h"

using namespace gputest;
using worker::gpu::SideStream;

namespace {

constexpr int kBusyUs = 20000;  // the side stream's head start; far beyond a memset's time

struct Buffers {
  unsigned char* a = nullptr;
  unsigned char* b = nullptr;
  cudaStream_t main = nullptr;
  Buffers() {
    CUDA_CHECK(cudaMalloc(&a, 4096));
    CUDA_CHECK(cudaMalloc(&b, 4096));
    CUDA_CHECK(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
  }
  ~Buffers() {
    cudaStreamSynchronize(main);
    cudaFree(a);
    cudaFree(b);
    cudaStreamDestroy(main);
  }
  unsigned char first(const unsigned char* p) const {
    unsigned char v = 0;
    CUDA_CHECK(cudaMemcpy(&v, p, 1, cudaMemcpyDeviceToHost));
    return v;
  }
};

// A side task that writes `value` over p after the busy wait.
void slow_side_write(SideStream& side, unsigned char* p, int value, std::initializer_list<SideStream::Range> reads) {
  side.begin();
  worker::gpu::busy_wait(kBusyUs, side.stream());
  CUDA_CHECK(cudaMemsetAsync(p, value, 4096, side.stream()));
  side.end(reads, {{p, 4096}});
}

}  // namespace

TEST_CASE("side stream: the main stream waits where a pending task reads or writes what it touches", "[gpu]") {
  Buffers buf;
  SideStream side(buf.main);

  SECTION("a write over a range the task writes waits for the task") {
    slow_side_write(side, buf.a, 1, {});
    side.guard_write(buf.a + 100, 8);
    CUDA_CHECK(cudaMemsetAsync(buf.a, 2, 4096, buf.main));
    CUDA_CHECK(cudaStreamSynchronize(buf.main));
    CHECK(cudaStreamQuery(side.stream()) == cudaSuccess);  // main's write came after the task's
    CHECK(buf.first(buf.a) == 2);
    CHECK(side.pending() == 0);
  }
  SECTION("a write over a range the task reads waits for the task") {
    slow_side_write(side, buf.a, 1, {{buf.b, 4096}});
    side.guard_write(buf.b, 4096);
    CUDA_CHECK(cudaMemsetAsync(buf.b, 3, 4096, buf.main));
    CUDA_CHECK(cudaStreamSynchronize(buf.main));
    // The task had finished (a is written) before main wrote b.
    CHECK(cudaStreamQuery(side.stream()) == cudaSuccess);
    CHECK(buf.first(buf.a) == 1);
  }
  SECTION("disjoint memory does not wait: the main stream finishes while the side is still busy") {
    slow_side_write(side, buf.a, 1, {});
    side.guard_write(buf.b, 4096);
    CUDA_CHECK(cudaMemsetAsync(buf.b, 4, 4096, buf.main));
    CUDA_CHECK(cudaStreamSynchronize(buf.main));
    CHECK(cudaStreamQuery(side.stream()) == cudaErrorNotReady);
    CHECK(side.pending() == 1);
    side.join();
    CHECK(side.pending() == 0);
    CUDA_CHECK(cudaStreamSynchronize(buf.main));
    CHECK(cudaStreamQuery(side.stream()) == cudaSuccess);
  }
  SECTION("waiting for a later task covers the earlier ones; the fork orders a task after the main stream") {
    CUDA_CHECK(cudaMemsetAsync(buf.b, 0, 4096, buf.main));
    worker::gpu::busy_wait(kBusyUs, buf.main);
    CUDA_CHECK(cudaMemsetAsync(buf.b, 7, 4096, buf.main));
    side.begin();  // after the main stream's 7: the copy below must see it
    CUDA_CHECK(cudaMemcpyAsync(buf.a, buf.b, 4096, cudaMemcpyDeviceToDevice, side.stream()));
    side.end({{buf.b, 4096}}, {{buf.a, 4096}});
    slow_side_write(side, buf.b + 0, 9, {});  // a second task, writing b after the copy
    side.guard_write(buf.b, 1);
    CHECK(side.pending() == 0);
    CUDA_CHECK(cudaStreamSynchronize(buf.main));
    CHECK(cudaStreamQuery(side.stream()) == cudaSuccess);
    CHECK(buf.first(buf.a) == 7);
    CHECK(buf.first(buf.b) == 9);
  }
}

namespace {

// Every byte of [p, p + n) on the device equals v.
bool all_bytes(const char* p, size_t n, unsigned char v) {
  std::vector<unsigned char> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), p, n, cudaMemcpyDeviceToHost));
  for (unsigned char b : h)
    if (b != v) return false;
  return true;
}

}  // namespace

TEST_CASE("workspace: the two streams' pieces of the shared buffer are kept apart in time", "[gpu]") {
  // The main stream is held busy before it writes its piece, so that a side task that should
  // wait for it but does not writes first and is overwritten (the race of 259d62f).
  Buffers buf;
  worker::gpu::DevicePool pool(size_t(1) << 20);
  SideStream side(buf.main);
  worker::gpu::Workspace ws(pool, &side);
  ws.note_plan(4096, 0);

  SECTION("a side piece inside the data gradient's waits for it") {
    ws.begin_side_task();
    char* m = static_cast<char*>(ws.main(3000));  // [0, 3000), written late
    worker::gpu::busy_wait(kBusyUs, buf.main);
    CUDA_CHECK(cudaMemsetAsync(m, 1, 3000, buf.main));
    char* s = static_cast<char*>(ws.side(2000));  // [2048, 4096): overlaps
    CHECK(s == m + 2048);
    CUDA_CHECK(cudaMemsetAsync(s, 2, 2048, side.stream()));
    ws.end_side_task({}, {});
    side.join();
    CUDA_CHECK(cudaStreamSynchronize(buf.main));
    CHECK(all_bytes(s, 2048, 2));  // the side task wrote after the main stream
    CHECK(all_bytes(m, 2048, 1));
  }
  SECTION("a side piece beside the data gradient's does not wait") {
    ws.begin_side_task();
    char* m = static_cast<char*>(ws.main(1000));
    worker::gpu::busy_wait(kBusyUs, buf.main);
    CUDA_CHECK(cudaMemsetAsync(m, 1, 1000, buf.main));
    char* s = static_cast<char*>(ws.side(2000));  // [2048, 4096)
    CUDA_CHECK(cudaMemsetAsync(s, 2, 2048, side.stream()));
    ws.end_side_task({}, {});
    CUDA_CHECK(cudaStreamSynchronize(side.stream()));
    CHECK(cudaStreamQuery(buf.main) == cudaErrorNotReady);  // the side task did not wait
    side.join();
    CUDA_CHECK(cudaStreamSynchronize(buf.main));
    CHECK(all_bytes(s, 2048, 2));
  }
  SECTION("the next main-stream piece over a pending task's waits for the task") {
    ws.begin_side_task();
    char* s = static_cast<char*>(ws.side(2000));
    worker::gpu::busy_wait(kBusyUs, side.stream());
    CUDA_CHECK(cudaMemsetAsync(s, 2, 2048, side.stream()));
    ws.end_side_task({}, {});
    char* m = static_cast<char*>(ws.main(4096));  // the whole buffer, the side task's piece too
    CUDA_CHECK(cudaMemsetAsync(m, 1, 4096, buf.main));
    CUDA_CHECK(cudaStreamSynchronize(buf.main));
    CHECK(cudaStreamQuery(side.stream()) == cudaSuccess);
    CHECK(all_bytes(m, 4096, 1));  // the main stream wrote last
    CHECK(side.pending() == 0);
  }
}

namespace {

std::vector<float> grads_after(bool wgrad_stream, DType t, Recompute mode, int micro_batches, float* loss,
                               bool dw_batched = true) {
  worker::gpu::GpuOptions g;
  g.precision = t;
  g.graph_engines = false;  // legacy plans only: no timed choice that could differ between the runs
  g.deterministic = true;
  g.wgrad_stream = wgrad_stream;
  g.dw_batched = dw_batched;
  worker::gpu::GpuOps ops(g);
  Model m(small_resnet(50, 8, mode), ops);
  m.init(5);
  ops.zero(m.grads(), m.num_params() * 4);
  // Several micro-batches without a host wait: the next forward overwrites activations that
  // the previous backward's weight gradients may still be reading.
  for (int k = 0; k < micro_batches; ++k) {
    learnable_batch(ops, m, 100 + 40 * k);
    m.forward_backward(1.0f / float(micro_batches));
  }
  const ModelRun r = downloaded(ops, m);
  *loss = r.loss;
  return r.grads;
}

}  // namespace

TEST_CASE("weight gradients on the side stream equal the one-stream run bit for bit", "[gpu]") {
  for (DType t : {DType::F32, DType::BF16}) {
    for (Recompute mode : {Recompute::None, Recompute::Block}) {
      INFO(dtype_name(t) << (mode == Recompute::Block ? ", blocks recomputed" : ", everything kept"));
      float loss_one = 0, loss_side = 0;
      const std::vector<float> one = grads_after(false, t, mode, 3, &loss_one);
      const std::vector<float> side = grads_after(true, t, mode, 3, &loss_side);
      REQUIRE(one.size() == side.size());
      size_t differ = 0;
      for (size_t i = 0; i < one.size(); ++i) differ += std::memcmp(&one[i], &side[i], sizeof(float)) != 0;
      CHECK(differ == 0);
      CHECK(std::memcmp(&loss_one, &loss_side, sizeof(float)) == 0);
    }
  }
}

// GpuOptions::dw_batched: the weight gradients wait in the compute dtype and are added to the fp32
// gradients in one pass when something reads them; the same values as each added as it is computed,
// over micro-batches (the next one's weight gradient adds the waiting one first), with the side stream
// or without. (Compared with ==: the one pass also adds the zeros between the convolutions' weights to
// the batch norms' gradients, which may turn a -0 into a +0.)
TEST_CASE("weight gradients added in one pass equal each added as it is computed", "[gpu]") {
  for (DType t : {DType::BF16, DType::F16}) {
    for (const bool side : {false, true}) {
      INFO(dtype_name(t) << (side ? ", side stream" : ", one stream"));
      float loss_each = 0, loss_batched = 0;
      const std::vector<float> each = grads_after(side, t, Recompute::None, 3, &loss_each, false);
      const std::vector<float> batched = grads_after(side, t, Recompute::None, 3, &loss_batched, true);
      REQUIRE(each.size() == batched.size());
      size_t differ = 0, nonzero = 0;
      for (size_t i = 0; i < each.size(); ++i) {
        differ += !(each[i] == batched[i]);
        nonzero += each[i] != 0.f;
      }
      CHECK(differ == 0);
      CHECK(nonzero > each.size() / 2);  // the gradients are there at all
      CHECK(std::memcmp(&loss_each, &loss_batched, sizeof(float)) == 0);
    }
  }
}

namespace {

// One fp16 micro-batch (its weight gradients left waiting, dw_batched), then loss scaling's unscale:
// with the waiting ones added in the unscale's pass (adds_dw), or by their own pass before it.
std::vector<float> unscaled_grads(bool wgrad_stream, bool adds_dw, float scale, bool* finite) {
  worker::gpu::GpuOptions g;
  g.precision = DType::F16;
  g.graph_engines = false;  // legacy plans only: no timed choice that could differ between the runs
  g.deterministic = true;
  g.wgrad_stream = wgrad_stream;
  g.dw_batched = true;
  g.unscale_adds_dw = adds_dw;
  worker::gpu::GpuOps ops(g);
  Model m(small_resnet(50, 8, Recompute::None), ops);
  m.init(5);
  ops.zero(m.grads(), m.num_params() * 4);
  LossScaleState s;
  s.scale = scale;
  ops.set_loss_scale(LossScaleRules{}, s, 0);
  learnable_batch(ops, m, 100);
  m.forward_backward(1.0f);  // the backend multiplies by its loss scale
  ops.unscale_grads(2.0f);
  *finite = ops.grads_verdict();
  return downloaded(ops, m).grads;
}

}  // namespace

// GpuOptions::unscale_adds_dw: fp16 loss scaling's unscale adds the weight gradients still waiting in its
// own pass (one read and write of the fp32 gradients fewer): the same bits and verdict as adding them
// first, with the side stream or without; and an overflow in them (a scale that makes some weight
// gradient inf) still gives the verdict false.
TEST_CASE("fp16 unscale with the waiting weight gradients added in its pass equals adding them first", "[gpu]") {
  for (const bool side : {false, true}) {
    INFO((side ? "side stream" : "one stream"));
    bool finite_fused = false, finite_first = false;
    const std::vector<float> fused = unscaled_grads(side, true, 1024.0f, &finite_fused);
    const std::vector<float> first = unscaled_grads(side, false, 1024.0f, &finite_first);
    REQUIRE(fused.size() == first.size());
    size_t differ = 0, nonzero = 0;
    for (size_t i = 0; i < fused.size(); ++i) {
      differ += std::memcmp(&fused[i], &first[i], sizeof(float)) != 0;
      nonzero += fused[i] != 0.f;
    }
    CHECK(differ == 0);
    CHECK(nonzero > fused.size() / 2);
    CHECK(finite_fused);
    CHECK(finite_first);
  }
  bool finite = true;
  unscaled_grads(false, true, 1e30f, &finite);  // the fp16 weight gradients overflow
  CHECK_FALSE(finite);
}
