// Where the workers' output goes: their log files (complete) and the console (best effort); and
// where the launcher's own messages go (stderr, the same kind of console). None of them ever
// blocks the supervisor on a reader: a console nobody reads (a stopped pager, a slow pipe,
// `| sleep 20`, `2>&1 | sleep 20`) must not delay failure handling or signals (issue 14).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace launch {

// What a Console carries: the workers' output (stdout), the launcher's own messages (stderr,
// through log.h), or both when stdout and stderr are the same file.
enum class ConsoleRole { Output, Messages, Both };

// A console stream, written without ever blocking the supervisor. A pipe, FIFO or terminal is
// reopened (/proc/self/fd/N) as a description of our own with O_NONBLOCK -- setting the flag on
// the inherited one would change it for the shell and everyone else sharing it. A socket is sent
// to with MSG_DONTWAIT. A regular file is written directly (its writes do not wait for a
// reader). What the stream does not take at once waits in a bounded buffer; what does not fit is
// dropped entire (a chunk, one line of --stream all, one log line) and counted, and a marker line
// says so where the gap is. The workers' logs are written separately and keep everything.
//
// Thread-safe: the supervisor writes the workers' output, and the launcher's messages come from
// it, the store's thread and the multi-node monitor. A Console never logs itself (it may be the
// log's own stream): what it has to say (a failing stdout, the bytes it dropped) waits as notices
// until its owner calls report(), outside every lock.
class Console {
 public:
  Console(int fd, ConsoleRole role, size_t capacity = size_t(4) << 20);
  ~Console();
  Console(const Console&) = delete;
  Console& operator=(const Console&) = delete;

  // Queues `data` and writes what the stream takes now. Never blocks, unless set_blocking(true).
  void write(std::string_view data);
  // Until something depends on the launcher (its store, its workers), a stalled reader may hold it
  // up: every write then waits until the stream has taken it or failed, and nothing is dropped.
  void set_blocking(bool blocking);
  bool pending() const;
  // What the supervisor's epoll watches for EPOLLOUT (edge-triggered: a write this Console could
  // not finish, from whichever thread, is retried when the reader makes room). -1: a stream that
  // never makes us wait (a regular file).
  int poll_fd() const { return mode_ == Mode::Plain ? -1 : fd_; }
  void flush();
  // At the end: writes what is queued for as long as the reader makes progress (giving up after
  // `stall` without any), then notes how much was dropped since the last finish(), if anything.
  void finish(std::chrono::milliseconds stall);
  // Logs the notices (log.h), from the thread that owns this console, holding none of its locks.
  void report();
  uint64_t dropped_bytes() const;
  // The reader went away (EPIPE): what came after it was not shown.
  bool reader_gone() const;

 private:
  enum class Mode { NonBlocking, Socket, Plain, Guarded };
  ssize_t put(const char* p, size_t n);
  void drop(size_t n);
  void failed(int err);
  void flush_locked();
  void note(bool warning, std::string text);
  const char* stream_name() const;

  mutable std::mutex mu_;
  int fd_ = -1;
  bool own_fd_ = false;
  Mode mode_ = Mode::Plain;
  ConsoleRole role_;
  size_t capacity_;
  bool blocking_ = false;
  std::string buf_;
  size_t pos_ = 0;
  bool closed_ = false;      // the reader is gone (EPIPE): nothing more is tried
  bool gap_ = false;         // something was dropped since the last byte queued
  uint64_t gap_bytes_ = 0;   // ... this much
  uint64_t dropped_bytes_ = 0;
  uint64_t dropped_noted_ = 0;  // ... of which finish() has told already
  int last_error_ = 0;       // the error being reported (ENOSPC...), 0 when writes work
  char last_char_ = '\n';
  std::vector<std::pair<bool, std::string>> notices_;  // (warning?, text)
};

// The launcher's two console streams: stdout for the workers' output, stderr for its messages.
// When fds 1 and 2 are the same file (`2>&1`, `&>`, one terminal: the same st_dev and st_ino),
// `out` and `err` are one Console, so that output and messages keep their order.
struct ConsoleStreams {
  std::shared_ptr<Console> out, err;
};
ConsoleStreams open_console_streams(int out_fd = 1, int err_fd = 2);

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
