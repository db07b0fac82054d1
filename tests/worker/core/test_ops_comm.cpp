// dtype helpers and the single-process communicator.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "worker/core/comm.h"
#include "worker/core/ops.h"

using namespace worker;

TEST_CASE("dtype sizes and names", "[ops]") {
  CHECK(dtype_size(DType::F32) == 4);
  CHECK(dtype_size(DType::BF16) == 2);
  CHECK(dtype_size(DType::F16) == 2);
  CHECK(std::string(dtype_name(DType::BF16)) == "bf16");
  Act a{nullptr, DType::BF16, 2, 3, 4, 5};
  CHECK(a.numel() == 120);
  CHECK(a.bytes() == 240);
}

TEST_CASE("single-process comm: one rank, collectives leave data as it is", "[comm]") {
  auto c = make_single_process_comm();
  CHECK(c->rank() == 0);
  CHECK(c->size() == 1);
  float v[3] = {1, 2, 3};
  c->allreduce_sum(v, 3);
  c->broadcast(v, sizeof v, 0);
  c->wait();
  CHECK(v[2] == 3.0f);
  const char send[] = "abc";
  char recv[4] = {};
  c->allgather_host(send, recv, 4);
  CHECK(std::memcmp(send, recv, 4) == 0);
}
