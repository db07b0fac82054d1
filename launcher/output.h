// Where the workers' output goes: their log files (complete) and the console (best effort).
// Neither ever blocks the supervisor on a reader: a console nobody reads (a stopped pager, a
// slow pipe, `| sleep 20`) must not delay failure handling or signals (issue 14).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace launch {

// The console: stdout, written without ever blocking. A pipe, FIFO or terminal is reopened
// (/proc/self/fd/1) as a description of our own with O_NONBLOCK -- setting the flag on the
// inherited one would change it for the shell and everyone else sharing it. A socket is sent
// to with MSG_DONTWAIT. A regular file is written directly (its writes do not wait for a
// reader). What the console does not take at once waits in a bounded buffer; what does not
// fit is dropped entire (a chunk, or one line of --stream all) and counted, and a marker line
// says so where the gap is. The logs are written separately and keep everything.
class Console {
 public:
  explicit Console(int fd, size_t capacity = size_t(4) << 20);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // Queues `data` and writes what the console takes now. Never blocks.
  void write(std::string_view data);
  // While pending(), the supervisor watches poll_fd() for EPOLLOUT and calls flush().
  bool pending() const { return pos_ < buf_.size(); }
  int poll_fd() const { return fd_; }
  void flush();
  // At the end: writes what is queued for as long as the reader makes progress (giving up after
  // `stall` without any), then logs how much was dropped in all, if anything.
  void finish(std::chrono::milliseconds stall);
  uint64_t dropped_bytes() const { return dropped_bytes_; }

 private:
  enum class Mode { NonBlocking, Socket, Plain, Guarded };
  ssize_t put(const char* p, size_t n);
  void drop(size_t n);
  void failed(int err);

  int fd_ = -1;
  bool own_fd_ = false;
  Mode mode_ = Mode::Plain;
  size_t capacity_;
  std::string buf_;
  size_t pos_ = 0;
  bool closed_ = false;      // the reader is gone (EPIPE): nothing more is tried
  bool gap_ = false;         // something was dropped since the last byte queued
  uint64_t gap_bytes_ = 0;   // ... this much
  uint64_t dropped_bytes_ = 0;
  int last_error_ = 0;       // the error being reported (ENOSPC...), 0 when writes work
  char last_char_ = '\n';
};

// One worker's log file: every byte, whatever the console does. A failing write (ENOSPC) is
// said once, the bytes it loses are counted, and writing resumes when the disk allows it, with
// a line saying how much is missing there.
class LogFile {
 public:
  LogFile() = default;
  LogFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~LogFile();
  LogFile(LogFile&& o) noexcept;
  LogFile& operator=(LogFile&& o) noexcept;

  void write(std::string_view data);
  // At the end: a warning naming the bytes this log misses, if any.
  void finish();
  uint64_t lost_bytes() const { return lost_total_; }

 private:
  bool write_all(const char* p, size_t n);
  int fd_ = -1;
  std::string path_;
  uint64_t lost_ = 0;        // since the last successful write
  uint64_t lost_total_ = 0;
  int error_ = 0;
};

}  // namespace launch
