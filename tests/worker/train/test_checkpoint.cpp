#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>

#include "worker/core/backend.h"
#include "worker/train/checkpoint.h"

TEST_CASE("the training state sits beside the weights", "[train][checkpoint]") {
  CHECK(worker::train_state_path("/a/ckpt.safetensors") == "/a/ckpt.train.safetensors");
  CHECK(worker::train_state_path("ckpt") == "ckpt.train.safetensors");
  CHECK_FALSE(worker::checkpoint_exists("/nonexistent/ckpt.safetensors"));
}

TEST_CASE("a checkpoint round-trips weights, buffers and training state", "[train][checkpoint]") {
  auto ops = worker::make_cpu_ops(1);
  worker::ModelConfig mc;
  mc.depth = 18;
  mc.width = 4;
  mc.num_classes = 3;
  mc.image_size = 16;
  mc.batch = 2;
  worker::Model model(mc, *ops);
  model.init(7);
  worker::TrainState ts;
  ts.step = 12;
  ts.epoch = 1;
  ts.batch = 3;
  ts.seed = 7;
  ts.optimizer = worker::OptimizerKind::Adam;
  ts.data = "learnable";
  ts.num_samples = 100;
  ts.global_batch = 8;
  ts.world = 2;
  ts.replicas = 4;
  ts.segment_start = 40;
  ts.optimizer_state["exp_avg"].assign(model.num_params(), 0.5f);
  ts.optimizer_state["exp_avg_sq"].assign(model.num_params(), 0.25f);
  const auto dir = std::filesystem::temp_directory_path() / ("train_ckpt_" + std::to_string(::getpid()));
  const std::string path = (dir / "sub" / "c.safetensors").string();  // the folder is created
  const worker::ModelState st = model.get_state();
  worker::save_checkpoint(path, model, st, ts);
  REQUIRE(worker::checkpoint_exists(path));

  worker::ModelState back;
  worker::TrainState tback;
  worker::load_checkpoint(path, model, &back, &tback);
  CHECK(back.params == st.params);
  CHECK(back.buffers == st.buffers);
  CHECK(tback.step == 12);
  CHECK(tback.epoch == 1);
  CHECK(tback.batch == 3);
  CHECK(tback.world == 2);
  CHECK(tback.replicas == 4);
  CHECK(tback.segment_start == 40);
  CHECK(tback.seed == 7);
  CHECK(tback.optimizer == worker::OptimizerKind::Adam);
  CHECK(tback.optimizer_state == ts.optimizer_state);
  CHECK(worker::load_weights(path, model).params == st.params);

  // A training state from another save does not belong to these weights.
  ts.step = 13;
  worker::save_checkpoint((dir / "other.safetensors").string(), model, st, ts);
  std::filesystem::copy_file(dir / "other.train.safetensors", dir / "sub" / "c.train.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  CHECK_THROWS_WITH(worker::load_checkpoint(path, model, &back, &tback), Catch::Contains("do not belong together"));
  std::filesystem::remove_all(dir);
}
