// PROGRAM lookup: PATH first, then beside the `launch` binary (so `build/bin/launch train_resnet`
// finds build/bin/train_resnet). Python programs (a *.py PROGRAM, a file that is not executable
// and not found executable in PATH, as torchrun runs it, -m MODULE, --run-path) run
// under `PYTHON -u`, PYTHON being --python, else PYTHON_EXEC (torchrun's override), else the
// first python3 in PATH. Pure: the file system is reached only through the two predicates.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "launcher/options.h"

namespace launch {

struct LookupContext {
  std::string path_var;  // $PATH
  std::string self_dir;  // directory of the launch binary (/proc/self/exe)
  std::string python;         // --python or PYTHON_EXEC (a path or a name); empty: python3 in PATH
  std::string python_source;  // where `python` came from, for messages ("--python", "PYTHON_EXEC")
  std::function<bool(const std::string&)> is_executable;  // regular file we may execute
  std::function<bool(const std::string&)> is_file;        // regular file (a script to read)
};

// Returns the argv to execve (argv[0] a path). Throws UsageError naming what was not found.
std::vector<std::string> resolve_command(const std::vector<std::string>& command, const LookupContext& ctx,
                                         ProgramKind kind = ProgramKind::Auto);

// argv as a shell would read it back ("python3 -u 'my script.py'"), for logs and --dry-run.
std::string join_command(const std::vector<std::string>& argv);
// The same for one log line: whole arguments up to `max_chars`, then how many arguments (and
// bytes of them) were left out. 100,000 arguments must not become one 600 KB line.
inline constexpr size_t kLoggedCommandChars = 1024;
std::string join_command(const std::vector<std::string>& argv, size_t max_chars);

// The I/O side: $PATH, /proc/self/exe, access()/stat(); `python` as above.
LookupContext real_lookup_context(const std::string& path_var, const std::string& python = "",
                                  const std::string& python_source = "");
inline LookupContext real_lookup_context() { return real_lookup_context("/usr/local/bin:/usr/bin:/bin"); }

}  // namespace launch
