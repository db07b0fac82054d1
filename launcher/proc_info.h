// What /proc says about a process, for messages about it: its command line and its state letter.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace launch {

struct ProcessInfo {
  pid_t pid = 0;
  std::string command;  // /proc/PID/cmdline, arguments joined by spaces (capped); else its comm
  char state = 0;       // 'R', 'S', 'D', 'T', 't', 'Z', ... of /proc/PID/stat
};

// The state letter of /proc/<pid>/stat; 0 when the process is gone.
char process_state(pid_t pid);
// nullopt when the process is gone.
std::optional<ProcessInfo> process_info(pid_t pid);
// "pid 123 (cat /mnt/x, state D: uninterruptible sleep)" for each, comma-separated.
std::string describe_processes(const std::vector<ProcessInfo>& ps);

}  // namespace launch
