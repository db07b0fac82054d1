// `launch kv ...`: the store's command-line client for shell-script workers and debugging.
#pragma once

namespace launch {

// argv[0] is "kv". Returns the process exit code (0 success, 1 failure/timeout, 2 usage).
int run_kv_command(int argc, char** argv);

}  // namespace launch
