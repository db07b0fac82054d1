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

TEST_CASE("a test's growth interval, and the mirror of a backend's state", "[train][fp16]") {
  LossScaler s(3);
  s.enabled = true;
  CHECK(s.rules().interval == 3);
  CHECK(s.rules().growth == LossScaler::kGrowth);
  CHECK(s.rules().backoff == LossScaler::kBackoff);
  for (int i = 0; i < 2; ++i) REQUIRE(s.update(true));
  CHECK(s.scale == 65536.0f);
  CHECK(s.update(true));
  CHECK(s.scale == 131072.0f);
  // What the backend reads back replaces the host's copy whole.
  s.mirror({1024.0f, 1, 7});
  CHECK(s.scale == 1024.0f);
  CHECK(s.growth_tracker == 1);
  CHECK(s.skipped == 7);
  const worker::LossScaleState st = s.state();
  CHECK((st.scale == 1024.0f && st.growth_tracker == 1 && st.skipped == 7));
}

TEST_CASE("the state machine the backends run is LossScaler's", "[train][fp16]") {
  // advance_loss_scale (worker/core/loss_scale.h) is what the GPU's kernel and the host default
  // run: the same verdicts give the same states as LossScaler::update.
  LossScaler s(2);
  s.enabled = true;
  worker::LossScaleState raw = s.state();
  const bool verdicts[] = {true, false, true, true, true, false, false, true, true};
  for (bool v : verdicts) {
    CHECK(worker::advance_loss_scale(raw, s.rules(), v) == s.update(v));
    CHECK(raw.scale == s.scale);
    CHECK(raw.growth_tracker == s.growth_tracker);
    CHECK(raw.skipped == s.skipped);
  }
  CHECK(s.skipped == 3);
}
