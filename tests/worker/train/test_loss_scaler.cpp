#include <catch2/catch.hpp>

#include "worker/train/loss_scaler.h"

using worker::LossScaler;

TEST_CASE("disabled loss scaling multiplies by one and never skips", "[train][fp16]") {
  LossScaler s;
  CHECK(s.multiplier() == 1.0f);
  CHECK(s.update(false));
  CHECK(s.skipped == 0);
  CHECK(s.scale == LossScaler::kInitScale);
}

TEST_CASE("an overflow skips the step and halves the scale", "[train][fp16]") {
  LossScaler s;
  s.enabled = true;
  CHECK(s.multiplier() == 65536.0f);
  for (int i = 0; i < 10; ++i) REQUIRE(s.update(true));
  CHECK(s.growth_tracker == 10);
  CHECK_FALSE(s.update(false));
  CHECK(s.scale == 32768.0f);
  CHECK(s.growth_tracker == 0);
  CHECK(s.skipped == 1);
  CHECK_FALSE(s.update(false));
  CHECK(s.scale == 16384.0f);
  CHECK(s.skipped == 2);
}

TEST_CASE("2000 clean steps in a row double the scale, as GradScaler", "[train][fp16]") {
  LossScaler s;
  s.enabled = true;
  for (int i = 0; i < 1999; ++i) REQUIRE(s.update(true));
  CHECK(s.scale == 65536.0f);
  CHECK(s.update(true));
  CHECK(s.scale == 131072.0f);
  CHECK(s.growth_tracker == 0);
  // An overflow in between restarts the count.
  for (int i = 0; i < 1500; ++i) REQUIRE(s.update(true));
  CHECK_FALSE(s.update(false));
  for (int i = 0; i < 1999; ++i) REQUIRE(s.update(true));
  CHECK(s.scale == 65536.0f);
  CHECK(s.update(true));
  CHECK(s.scale == 131072.0f);
}
