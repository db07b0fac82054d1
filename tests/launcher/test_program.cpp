#include <catch2/catch.hpp>

#include <set>

#include "launcher/errors.h"
#include "launcher/program.h"

using namespace launch;

namespace {
// A fake file system: executables and plain files by path.
LookupContext fake(std::set<std::string> exes, std::set<std::string> files = {}) {
  LookupContext c;
  c.path_var = "/usr/local/bin:/usr/bin";
  c.self_dir = "/opt/build/bin";
  for (const auto& e : exes) files.insert(e);
  c.is_executable = [exes](const std::string& p) { return exes.count(p) > 0; };
  c.is_file = [files](const std::string& p) { return files.count(p) > 0; };
  return c;
}
using V = std::vector<std::string>;
}  // namespace

TEST_CASE("program lookup: PATH first, in order", "[launcher][program]") {
  auto c = fake({"/usr/bin/env", "/usr/local/bin/env", "/opt/build/bin/env"});
  CHECK(resolve_command({"env", "-i"}, c) == V{"/usr/local/bin/env", "-i"});
}

TEST_CASE("program lookup: then beside the launch binary", "[launcher][program]") {
  auto c = fake({"/opt/build/bin/train_resnet"});
  CHECK(resolve_command({"train_resnet", "--depth", "18"}, c) ==
        V{"/opt/build/bin/train_resnet", "--depth", "18"});
}

TEST_CASE("program lookup: a path is taken as it is", "[launcher][program]") {
  auto c = fake({"./tool", "/abs/tool"});
  CHECK(resolve_command({"./tool"}, c) == V{"./tool"});
  CHECK(resolve_command({"/abs/tool", "x"}, c) == V{"/abs/tool", "x"});
  CHECK_THROWS_AS(resolve_command({"./missing"}, c), UsageError);
}

TEST_CASE("program lookup: *.py runs under python3 -u", "[launcher][program]") {
  auto c = fake({"/usr/bin/python3"}, {"train.py", "/opt/build/bin/tool.py"});
  CHECK(resolve_command({"train.py", "--lr", "0.1"}, c) ==
        V{"/usr/bin/python3", "-u", "train.py", "--lr", "0.1"});
  CHECK(resolve_command({"tool.py"}, c) == V{"/usr/bin/python3", "-u", "/opt/build/bin/tool.py"});
  CHECK_THROWS_WITH(resolve_command({"nope.py"}, c), Catch::Contains("nope.py"));
  auto no_python = fake({}, {"train.py"});
  CHECK_THROWS_WITH(resolve_command({"train.py"}, no_python), Catch::Contains("python3 not found"));
}

TEST_CASE("program lookup: unknown program is a usage error naming it", "[launcher][program]") {
  auto c = fake({});
  CHECK_THROWS_WITH(resolve_command({"train_resnet"}, c),
                    Catch::Contains("'train_resnet' not found") && Catch::Contains("/opt/build/bin"));
  CHECK_THROWS_AS(resolve_command({}, c), UsageError);
}

TEST_CASE("program lookup: the real context finds /bin/sh", "[launcher][program]") {
  auto argv = resolve_command({"sh", "-c", "true"}, real_lookup_context());
  REQUIRE(argv.size() == 3);
  CHECK(argv[0].find("/sh") != std::string::npos);
}

TEST_CASE("program lookup: a script that is not executable runs under python3, as torchrun runs it", "[launcher][program]") {
  // "train" in the working directory without the x bit (torchrun: python -u train); "./tool.sh"
  // likewise. An executable of that name in PATH still wins, and --no-python executes it as it is.
  auto c = fake({"/usr/bin/python3", "/usr/bin/env"}, {"train", "./tool.sh", "env"});
  CHECK(resolve_command({"train", "--lr", "1"}, c) == V{"/usr/bin/python3", "-u", "train", "--lr", "1"});
  CHECK(resolve_command({"./tool.sh"}, c) == V{"/usr/bin/python3", "-u", "./tool.sh"});
  CHECK(resolve_command({"env"}, c) == V{"/usr/bin/env"});
  CHECK_THROWS_WITH(resolve_command({"train"}, c, ProgramKind::NoPython), Catch::Contains("'train' not found"));
}
