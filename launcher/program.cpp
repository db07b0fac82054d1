#include "launcher/program.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include "launcher/errors.h"

namespace launch {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Candidates for a bare name: each PATH entry (an empty entry is the current directory, as in
// execvp), then the launcher's own directory.
std::vector<std::string> candidates(const std::string& name, const LookupContext& ctx) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t colon = ctx.path_var.find(':', start);
    std::string dir = ctx.path_var.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    out.push_back(dir.empty() ? name : dir + "/" + name);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (!ctx.self_dir.empty()) out.push_back(ctx.self_dir + "/" + name);
  return out;
}

std::string find_in(const std::string& name, const LookupContext& ctx,
                    const std::function<bool(const std::string&)>& ok) {
  for (const auto& c : candidates(name, ctx))
    if (ok(c)) return c;
  return {};
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::vector<std::string> resolve_command(const std::vector<std::string>& command, const LookupContext& ctx,
                                         ProgramKind kind) {
  if (command.empty() || command.front().empty())
    throw UsageError("no PROGRAM given: usage is launch [options] PROGRAM [ARGS...]");
  const std::string& prog = command.front();
  const bool has_slash = prog.find('/') != std::string::npos;
  // torchrun runs any script under Python: a file that is no executable (no x bit, not in PATH)
  // does here too, "train" as "train.py".
  const bool plain_script = kind == ProgramKind::Auto && ctx.is_file(prog) &&
                            (has_slash ? !ctx.is_executable(prog) : find_in(prog, ctx, ctx.is_executable).empty());
  const bool python = kind == ProgramKind::Module || kind == ProgramKind::PythonScript ||
                      (kind == ProgramKind::Auto && (ends_with(prog, ".py") || plain_script));
  std::vector<std::string> argv;

  if (python) {
    std::string interpreter;
    if (ctx.python.empty()) {
      interpreter = find_in("python3", ctx, ctx.is_executable);
      if (interpreter.empty())
        throw UsageError("python3 not found in PATH; it is needed to run " + prog + " (or give --python PATH)");
    } else {
      interpreter = ctx.python.find('/') != std::string::npos ? ctx.python : find_in(ctx.python, ctx, ctx.is_executable);
      if (interpreter.empty() || !ctx.is_executable(interpreter))
        throw UsageError(ctx.python_source + " '" + ctx.python + "' is not an executable interpreter");
    }
    if (kind == ProgramKind::Module) {
      argv = {interpreter, "-u", "-m", prog};
    } else {
      // python resolves a relative script against the working directory, so that comes first.
      std::string script = ctx.is_file(prog) ? prog : has_slash ? "" : find_in(prog, ctx, ctx.is_file);
      if (script.empty())
        throw UsageError("python program '" + prog + "' not found (looked in the current directory" +
                         std::string(has_slash ? "" : ", PATH and beside launch") + ")");
      argv = {interpreter, "-u", script};
    }
  } else if (has_slash) {
    if (!ctx.is_executable(prog))
      throw UsageError("program '" + prog + "' does not exist or is not executable");
    argv = {prog};
  } else {
    std::string found = find_in(prog, ctx, ctx.is_executable);
    if (found.empty())
      throw UsageError("program '" + prog + "' not found in PATH nor beside launch (" +
                       ctx.self_dir + "); give its path, e.g. ./" + prog);
    argv = {found};
  }
  argv.insert(argv.end(), command.begin() + 1, command.end());
  return argv;
}

namespace {

std::string shell_quote(const std::string& a) {
  if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789_-+=./:,@%") == std::string::npos)
    return a;
  std::string out = "'";
  for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string join_command(const std::vector<std::string>& argv) { return join_command(argv, std::string::npos); }

std::string join_command(const std::vector<std::string>& argv, size_t max_chars) {
  std::string out;
  size_t i = 0;
  for (; i < argv.size(); ++i) {
    const std::string q = shell_quote(argv[i]);
    if (i > 0 && out.size() + 1 + q.size() > max_chars) break;  // argv[0] is always shown
    out += (i ? " " : "") + q;
  }
  if (i == argv.size()) return out;
  size_t bytes = 0;
  for (size_t k = i; k < argv.size(); ++k) bytes += argv[k].size() + 1;
  return out + " ... (" + std::to_string(argv.size() - i) + " more argument(s), " + std::to_string(bytes) +
         " bytes, not shown)";
}

LookupContext real_lookup_context(const std::string& path_var, const std::string& python,
                                  const std::string& python_source) {
  LookupContext ctx;
  ctx.path_var = path_var;
  ctx.python = python;
  ctx.python_source = python_source;
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    std::string exe(buf, static_cast<size_t>(n));
    ctx.self_dir = exe.substr(0, exe.rfind('/'));
  }
  ctx.is_file = [](const std::string& p) {
    struct stat st;
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  };
  ctx.is_executable = [f = ctx.is_file](const std::string& p) {
    return f(p) && access(p.c_str(), X_OK) == 0;
  };
  return ctx;
}

}  // namespace launch
