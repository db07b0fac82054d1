// launch: start one worker per device, supervise them, tear them down on the first failure.
#include <string_view>

#include "launcher/run.h"
#include "launcher/store/kv_command.h"

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "kv") return launch::run_kv_command(argc - 1, argv + 1);
  return launch::run(argc, argv);
}
