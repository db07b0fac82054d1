#include "launcher/proc_info.h"

#include <fstream>
#include <iterator>

namespace launch {

namespace {

// Arguments of a command line shown in a message; the rest is cut (a worker's may be huge).
constexpr size_t kCommandChars = 120;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

const char* state_name(char s) {
  switch (s) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "uninterruptible sleep";
    case 'T': return "stopped";
    case 't': return "stopped by a debugger";
    case 'Z': return "zombie";
    case 'X': return "dead";
    case 'I': return "idle";
    default: return "unknown";
  }
}

}  // namespace

char process_state(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // the comm may hold ')' itself: the last one ends it
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

std::optional<ProcessInfo> process_info(pid_t pid) {
  ProcessInfo p;
  p.pid = pid;
  p.state = process_state(pid);
  if (p.state == 0) return std::nullopt;
  std::string cmd = slurp("/proc/" + std::to_string(pid) + "/cmdline");
  while (!cmd.empty() && cmd.back() == '\0') cmd.pop_back();
  for (char& c : cmd)
    if (c == '\0' || static_cast<unsigned char>(c) < 0x20) c = ' ';
  if (cmd.empty()) {  // a kernel thread, or a process that is exiting
    cmd = slurp("/proc/" + std::to_string(pid) + "/comm");
    while (!cmd.empty() && cmd.back() == '\n') cmd.pop_back();
  }
  if (cmd.size() > kCommandChars) cmd = cmd.substr(0, kCommandChars) + "...";
  p.command = cmd;
  return p;
}

std::string describe_processes(const std::vector<ProcessInfo>& ps) {
  std::string out;
  for (const auto& p : ps)
    out += (out.empty() ? "" : ", ") + std::string("pid ") + std::to_string(p.pid) + " (" + p.command + ", state " +
           std::string(1, p.state) + ": " + state_name(p.state) + ")";
  return out;
}

}  // namespace launch
