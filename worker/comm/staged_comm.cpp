#include "worker/comm/staged_comm.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace worker {
namespace {

class StagedComm final : public Comm {
 public:
  StagedComm(std::unique_ptr<Comm> inner, Ops& ops) : inner_(std::move(inner)), ops_(ops) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  void allreduce_sum(float* data, size_t count) override {
    float* h = host(count);
    ops_.download(h, data, count * sizeof(float));
    inner_->allreduce_sum(h, count);
    ops_.upload(data, h, count * sizeof(float));
  }

  void broadcast(void* data, size_t bytes, int root) override {
    float* h = host((bytes + sizeof(float) - 1) / sizeof(float));
    if (rank() == root) ops_.download(h, data, bytes);
    inner_->broadcast(h, bytes, root);
    if (rank() != root) ops_.upload(data, h, bytes);
  }

  void wait() override { inner_->wait(); }

  // Every block goes down (the ring sends them all); only this rank's comes back, the one whose
  // sum it ends with (the others' contents are unspecified by the contract anyway).
  void reduce_scatter_sum(float* data, size_t count) override {
    float* h = host(count);
    ops_.download(h, data, count * sizeof(float));
    inner_->reduce_scatter_sum(h, count);
    const auto [o, n] = comm_block(count, size(), rank());
    ops_.upload(data + o, h + o, n * sizeof(float));
  }

  // This rank's block goes down, every block comes back.
  void allgather(float* data, size_t count) override {
    float* h = host(count);
    const auto [o, n] = comm_block(count, size(), rank());
    ops_.download(h + o, data + o, n * sizeof(float));
    inner_->allgather(h, count);
    ops_.upload(data, h, count * sizeof(float));
  }

  void allgather_host(const void* send, void* recv, size_t bytes) override { inner_->allgather_host(send, recv, bytes); }
  void allgather_host_start(const void* send, void* recv, size_t bytes) override {
    inner_->allgather_host_start(send, recv, bytes);
  }
  void allgather_host_finish() override { inner_->allgather_host_finish(); }
  void barrier_untimed() override { inner_->barrier_untimed(); }

 private:
  float* host(size_t floats) {
    if (staging_.size() < floats) staging_.resize(floats);
    return staging_.data();
  }

  std::unique_ptr<Comm> inner_;
  Ops& ops_;
  std::vector<float> staging_;  // grows to the largest collective, then stays
};

}  // namespace

std::unique_ptr<Comm> make_staged_comm(std::unique_ptr<Comm> inner, Ops& ops) {
  return std::make_unique<StagedComm>(std::move(inner), ops);
}

}  // namespace worker
