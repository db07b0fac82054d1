// TensorBoard's record framing and CRC. The protobuf payloads are checked end to end by reading
// files back with the tensorboard package (test_train_resnet.py, case tensorboard).
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "worker/train/tensorboard.h"

using namespace worker;

TEST_CASE("CRC-32C: the Castagnoli check values", "[train][tensorboard]") {
  CHECK(tb::crc32c("123456789", 9) == 0xe3069283u);  // the standard check value (RFC 3720 B.4)
  const std::string zeros(32, '\0');
  CHECK(tb::crc32c(zeros.data(), zeros.size()) == 0x8a9136aau);  // RFC 3720 B.4: 32 bytes of zeros
  CHECK(tb::crc32c("", 0) == 0u);
  const uint32_t c = tb::crc32c("123456789", 9);
  CHECK(tb::masked_crc32c("123456789", 9) == ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST_CASE("a TFRecord frames its payload with two masked CRCs", "[train][tensorboard]") {
  const std::string payload = tb::scalars_event(1.5, 300, {{"train/loss", 0.25f}});
  const std::string r = tb::tfrecord(payload);
  REQUIRE(r.size() == 8 + 4 + payload.size() + 4);
  uint64_t len = 0;
  std::memcpy(&len, r.data(), 8);
  CHECK(len == payload.size());
  uint32_t len_crc = 0, data_crc = 0;
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 12 + payload.size(), 4);
  CHECK(len_crc == tb::masked_crc32c(r.data(), 8));
  CHECK(data_crc == tb::masked_crc32c(payload.data(), payload.size()));
  CHECK(r.compare(12, payload.size(), payload) == 0);
  // The tag and the float are in the payload as protobuf writes them.
  CHECK(payload.find("train/loss") != std::string::npos);
  const float v = 0.25f;
  CHECK(payload.find(std::string("\x15", 1) + std::string(reinterpret_cast<const char*>(&v), 4)) != std::string::npos);
  CHECK(tb::file_version_event(0.0).find("brain.Event:2") != std::string::npos);
}
