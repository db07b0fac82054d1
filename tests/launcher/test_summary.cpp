#include <catch2/catch.hpp>

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "launcher/errors.h"
#include "launcher/summary.h"

using namespace launch;

TEST_CASE("summary: one record per rank, root cause and signal names", "[launcher][summary]") {
  JobOutcome o;
  o.policy.on_worker_end(1, {Termination::How::Signaled, SIGSEGV});
  WorkerRecord r0{0, {DeviceKind::Gpu, 3}, 100, "/l/workerlog.0", 1700000000.25, 1700000001.5,
                  Termination{Termination::How::Signaled, SIGTERM}, {}};
  WorkerRecord r1{1, {DeviceKind::Cpu, -1}, 101, "/l/workerlog.1", 1700000000.0, 1700000000.5,
                  Termination{Termination::How::Signaled, SIGSEGV}, {}};
  WorkerRecord r2{2, {DeviceKind::Cpu, -1}, 102, "/l/workerlog.2", 1700000000.0, 1700000002.0,
                  Termination{Termination::How::Exited, 0}, {}};
  o.records = {r0, r1, r2};
  auto j = nlohmann::json::parse(summary_json("jobx", o));
  CHECK(j["job_id"] == "jobx");
  CHECK(j["exit_code"] == 139);
  CHECK(j["root_cause"]["rank"] == 1);
  CHECK(j["root_cause"]["description"] == "rank 1 killed by SIGSEGV");
  CHECK(j["restart_count"] == 0);
  CHECK(j["launcher_signal"].is_null());
  REQUIRE(j["ranks"].size() == 3);
  CHECK(j["ranks"][0]["device"] == "gpu:3");
  CHECK(j["ranks"][0]["signal"] == "SIGTERM");
  CHECK(j["ranks"][0]["exit_code"].is_null());
  CHECK(j["ranks"][0]["start_time"] == "2023-11-14T22:13:20.250Z");
  CHECK(j["ranks"][1]["pid"] == 101);
  CHECK(j["ranks"][2]["exit_code"] == 0);
  CHECK(j["ranks"][2]["signal"].is_null());
  CHECK(j["ranks"][2]["log"] == "/l/workerlog.2");
  CHECK(j["ranks"][2]["duration_s"].get<double>() == Approx(2.0));
}

TEST_CASE("summary: written atomically, never half-written", "[launcher][summary]") {
  char tmpl[] = "/tmp/launch-summary-test-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  write_file_atomically(dir + "/s.json", "{\"a\": 1}\n");
  std::ifstream f(dir + "/s.json");
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(content == "{\"a\": 1}\n");
  CHECK_THROWS_AS(write_file_atomically(dir + "/missing/s.json", "x"), SystemError);
  size_t entries = 0;
  for (auto& e : std::filesystem::directory_iterator(dir)) entries += e.path().filename() == "s.json" ? 0 : 1;
  CHECK(entries == 0);  // no temporary left behind
  std::filesystem::remove_all(dir);
}
