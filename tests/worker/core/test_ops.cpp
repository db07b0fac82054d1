// The Ops interface's dtype helpers.
#include <catch2/catch.hpp>

#include <string>

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
