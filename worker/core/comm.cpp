// The single-process communicator: with one rank every collective is the identity.
#include <cstring>

#include "worker/core/comm.h"

namespace worker {

namespace {

class SingleProcessComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(float*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  void wait() override {}
  void allgather_host(const void* send, void* recv, size_t bytes) override {
    if (bytes > 0 && send != recv) std::memmove(recv, send, bytes);
  }
};

}  // namespace

std::unique_ptr<Comm> make_single_process_comm() { return std::make_unique<SingleProcessComm>(); }

}  // namespace worker
