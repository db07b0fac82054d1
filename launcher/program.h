// PROGRAM lookup: PATH first, then beside the `launch` binary (so `build/bin/launch train_resnet`
// finds build/bin/train_resnet); a *.py program runs under `python3 -u`, as paddle does.
// Pure: the file system is reached only through the two predicates.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace launch {

struct LookupContext {
  std::string path_var;  // $PATH
  std::string self_dir;  // directory of the launch binary (/proc/self/exe)
  std::function<bool(const std::string&)> is_executable;  // regular file we may execute
  std::function<bool(const std::string&)> is_file;        // regular file (a script to read)
};

// Returns the argv to execve (argv[0] a path). Throws UsageError naming what was not found.
std::vector<std::string> resolve_command(const std::vector<std::string>& command,
                                         const LookupContext& ctx);

LookupContext real_lookup_context();  // the I/O side: $PATH, /proc/self/exe, access()/stat()

}  // namespace launch
