#include <catch2/catch.hpp>

#include <algorithm>
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

TEST_CASE("join_command quotes for the shell; the logged form caps 100,000 arguments", "[launcher][program]") {
  CHECK(join_command({"/usr/bin/python3", "-u", "my script.py", "it's"}) ==
        "/usr/bin/python3 -u 'my script.py' 'it'\\''s'");
  // Issue 22, item 15: the job's first log line held all of them (589 KB).
  V argv{"/bin/echo"};
  for (int i = 0; i < 100000; ++i) argv.push_back("arg" + std::to_string(i));
  const std::string line = join_command(argv, kLoggedCommandChars);
  CHECK(line.size() < kLoggedCommandChars + 100);
  CHECK(line.rfind("/bin/echo arg0 arg1 ", 0) == 0);
  // Whole arguments only, then what is missing.
  const size_t shown = static_cast<size_t>(std::count(line.begin(), line.begin() + long(line.find(" ...")), ' '));
  size_t left_bytes = 0;
  for (size_t k = shown + 1; k < argv.size(); ++k) left_bytes += argv[k].size() + 1;
  CHECK_THAT(line, Catch::EndsWith(" ... (" + std::to_string(argv.size() - shown - 1) + " more argument(s), " +
                                   std::to_string(left_bytes) + " bytes, not shown)"));
  CHECK(join_command(argv).size() > 500000);  // --dry-run still shows every one
  // A short command is not touched; argv[0] is shown whatever its length.
  CHECK(join_command({"true", "x"}, kLoggedCommandChars) == "true x");
  const std::string long_name(2000, 'p');
  CHECK(join_command({long_name, "a"}, kLoggedCommandChars) == long_name + " ... (1 more argument(s), 2 bytes, not shown)");
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
