#include "launcher/summary.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "launcher/errors.h"

namespace launch {

std::string iso8601_utc(double t) {
  time_t secs = static_cast<time_t>(std::floor(t));
  int ms = static_cast<int>((t - std::floor(t)) * 1000.0);
  tm utc;
  gmtime_r(&secs, &utc);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, ms);
  return buf;
}

std::string summary_json(const std::string& job_id, const JobOutcome& o) {
  using nlohmann::json;
  json j;
  j["job_id"] = job_id;
  j["exit_code"] = o.policy.exit_code();
  j["world_size"] = o.records.size();
  j["root_cause"] = nullptr;
  if (const auto& root = o.policy.root())
    j["root_cause"] = {{"rank", root->rank}, {"description", "rank " + std::to_string(root->rank) + " " + root->description}};
  else if (auto remote = o.policy.remote_failure())  // multi-node: another node's failure
    j["root_cause"] = {{"rank", nullptr}, {"description", *remote}};
  j["restart_count"] = o.restart_count;
  j["launcher_signal"] = nullptr;
  if (auto s = o.policy.launcher_signal()) j["launcher_signal"] = signal_name(*s);
  j["stragglers"] = json::array();  // processes SIGKILL could not end (uninterruptible sleep)
  for (const auto& p : o.stragglers)
    j["stragglers"].push_back({{"pid", p.pid}, {"command", p.command}, {"state", std::string(1, p.state)}});
  j["ranks"] = json::array();
  for (const auto& r : o.records) {
    json rec{{"rank", r.rank},
             {"pid", r.pid},
             {"device", describe(r.device)},
             {"start_time", iso8601_utc(r.start_time)},
             {"end_time", nullptr},
             {"exit_code", nullptr},
             {"signal", nullptr},
             {"log", r.log_path}};
    if (r.end) {
      rec["end_time"] = iso8601_utc(r.end_time);
      rec["duration_s"] = r.end_time - r.start_time;
      if (r.end->how == Termination::How::Signaled)
        rec["signal"] = signal_name(r.end->value);
      else
        rec["exit_code"] = r.end->value;
    }
    j["ranks"].push_back(std::move(rec));
  }
  return j.dump(2) + "\n";
}

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw SystemError("cannot write " + tmp, errno);
  const char* p = content.data();
  size_t n = content.size();
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int err = errno;
      close(fd);
      unlink(tmp.c_str());
      throw SystemError("cannot write " + tmp, err);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  if (fsync(fd) < 0 || close(fd) < 0) {
    int err = errno;
    unlink(tmp.c_str());
    throw SystemError("cannot write " + tmp, err);
  }
  if (rename(tmp.c_str(), path.c_str()) < 0) {
    int err = errno;
    unlink(tmp.c_str());
    throw SystemError("cannot rename " + tmp + " to " + path, err);
  }
}

}  // namespace launch
