// The communicator interface's shared parts: the single-process communicator.
#include <catch2/catch.hpp>

#include <cstring>

#include "worker/comm/comm.h"

using namespace worker;

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
