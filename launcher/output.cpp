#include "launcher/output.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launcher/log.h"

namespace launch {

namespace {

std::string bytes_text(uint64_t n) { return std::to_string(n) + " byte" + (n == 1 ? "" : "s"); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Console

Console::Console(int fd, ConsoleRole role, size_t capacity) : fd_(fd), role_(role), capacity_(capacity) {
  struct stat st;
  if (fstat(fd, &st) < 0) {
    mode_ = Mode::Plain;
    return;
  }
  if (S_ISSOCK(st.st_mode)) {
    mode_ = Mode::Socket;
  } else if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const int own = open(self.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (own >= 0) {
      fd_ = own;
      own_fd_ = true;
      mode_ = Mode::NonBlocking;
    } else {
      // Writes no larger than PIPE_BUF after poll() says there is room do not block.
      mode_ = Mode::Guarded;
    }
  } else {
    mode_ = Mode::Plain;
  }
}

Console::~Console() {
  if (own_fd_) close(fd_);
}

const char* Console::stream_name() const {
  switch (role_) {
    case ConsoleRole::Output: return "stdout";
    case ConsoleRole::Messages: return "stderr";
    case ConsoleRole::Both: break;
  }
  return "stdout and stderr";
}

void Console::note(bool warning, std::string text) { notices_.emplace_back(warning, std::move(text)); }

ssize_t Console::put(const char* p, size_t n) {
  switch (mode_) {
    case Mode::Socket: return send(fd_, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    case Mode::Guarded: {
      pollfd pf{fd_, POLLOUT, 0};
      if (poll(&pf, 1, 0) <= 0 || !(pf.revents & POLLOUT)) {
        errno = EAGAIN;
        return -1;
      }
      return ::write(fd_, p, n < PIPE_BUF ? n : PIPE_BUF);
    }
    case Mode::NonBlocking:
    case Mode::Plain: break;
  }
  return ::write(fd_, p, n);
}

void Console::drop(size_t n) {
  dropped_bytes_ += n;
  gap_bytes_ += n;
  gap_ = true;
}

void Console::failed(int err) {
  const std::string keeps = role_ == ConsoleRole::Messages ? "" : " (the workers' logs have all of their output)";
  if (err == EPIPE) {
    note(false, std::string("console: ") + stream_name() + " was closed; console output stops here" + keeps);
    closed_ = true;
  } else if (err != last_error_) {
    note(true, std::string("console: cannot write ") + stream_name() + ": " + std::strerror(err) +
                   "; what it cannot take is dropped until it can be written again" + keeps);
  }
  last_error_ = err;
  drop(buf_.size() - pos_);
  buf_.clear();
  pos_ = 0;
}

void Console::set_blocking(bool blocking) {
  std::lock_guard<std::mutex> lock(mu_);
  blocking_ = blocking;
}

bool Console::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pos_ < buf_.size();
}

uint64_t Console::dropped_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_bytes_;
}

bool Console::reader_gone() const {
  std::lock_guard<std::mutex> lk(mu_);
  return closed_;
}

void Console::write(std::string_view data) {
  if (data.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) {
    dropped_bytes_ += data.size();
    return;
  }
  if (buf_.size() - pos_ + data.size() > capacity_) {
    drop(data.size());  // the whole chunk or line: never half of it
    return;
  }
  if (gap_) {
    std::string marker = last_char_ == '\n' ? "" : "\n";
    marker += "[launch] " + bytes_text(gap_bytes_) +
              (role_ == ConsoleRole::Output     ? " of output dropped here: the console did not keep up (the workers' logs have all of it)\n"
               : role_ == ConsoleRole::Messages ? " of launch's messages dropped here: stderr did not keep up\n"
                                                : " dropped here: the console did not keep up (the workers' logs have all of their output)\n");
    buf_ += marker;
    gap_ = false;
    gap_bytes_ = 0;
  }
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  buf_.append(data.data(), data.size());
  last_char_ = data.back();
  flush_locked();
  while (blocking_ && pos_ < buf_.size() && !closed_) {
    pollfd pf{fd_, POLLOUT, 0};
    if (poll(&pf, 1, -1) < 0 && errno != EINTR) break;
    flush_locked();
  }
}

void Console::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  flush_locked();
}

void Console::flush_locked() {
  while (pos_ < buf_.size()) {
    const ssize_t n = put(buf_.data() + pos_, buf_.size() - pos_);
    if (n > 0) {
      pos_ += static_cast<size_t>(n);
      if (last_error_ != 0) {
        note(false, std::string("console: ") + stream_name() + " can be written again");
        last_error_ = 0;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    failed(n < 0 ? errno : EIO);
    return;
  }
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
    if (buf_.capacity() > (size_t(1) << 20)) std::string().swap(buf_);
  } else if (pos_ > (size_t(1) << 20)) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

void Console::finish(std::chrono::milliseconds stall) {
  std::unique_lock<std::mutex> lock(mu_);
  while (pos_ < buf_.size() && !closed_) {
    const size_t before = pos_;
    flush_locked();
    if (pos_ >= buf_.size()) break;
    if (pos_ != before) continue;
    // Others may log meanwhile (the store's thread): the wait holds no lock.
    lock.unlock();
    pollfd pf{fd_, POLLOUT, 0};
    const int ready = poll(&pf, 1, static_cast<int>(stall.count()));
    lock.lock();
    if (ready <= 0) break;
  }
  if (pos_ < buf_.size()) {
    drop(buf_.size() - pos_);
    buf_.clear();
    pos_ = 0;
  }
  if (dropped_bytes_ > dropped_noted_) {
    const std::string n = bytes_text(dropped_bytes_ - dropped_noted_);
    note(true, role_ == ConsoleRole::Output ? "console: " + n + " of the workers' output did not reach the console (too "
                                              "slow or failing); the logs have all of it"
               : role_ == ConsoleRole::Both ? "console: " + n + " of the workers' output and launch's messages did not "
                                              "reach the console (too slow or failing); the logs have all of the output"
                                            : "console: " + n + " of launch's messages did not reach stderr (too slow "
                                              "or failing)");
    dropped_noted_ = dropped_bytes_;
  }
}

void Console::report() {
  std::vector<std::pair<bool, std::string>> notices;
  {
    std::lock_guard<std::mutex> lock(mu_);
    notices.swap(notices_);
  }
  for (const auto& [warning, text] : notices) warning ? log::warn(text) : log::info(text);
}

ConsoleStreams open_console_streams(int out_fd, int err_fd) {
  struct stat o, e;
  if (fstat(out_fd, &o) == 0 && fstat(err_fd, &e) == 0 && o.st_dev == e.st_dev && o.st_ino == e.st_ino) {
    auto both = std::make_shared<Console>(out_fd, ConsoleRole::Both);
    return {both, both};
  }
  return {std::make_shared<Console>(out_fd, ConsoleRole::Output), std::make_shared<Console>(err_fd, ConsoleRole::Messages)};
}

// ---------------------------------------------------------------------------------------------
// LogFile

LogFile::~LogFile() {
  if (fd_ >= 0) close(fd_);
}

LogFile::LogFile(LogFile&& o) noexcept
    : fd_(o.fd_), path_(std::move(o.path_)), lost_(o.lost_), lost_total_(o.lost_total_), error_(o.error_) {
  o.fd_ = -1;
}

LogFile& LogFile::operator=(LogFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    lost_ = o.lost_;
    lost_total_ = o.lost_total_;
    error_ = o.error_;
    o.fd_ = -1;
  }
  return *this;
}

bool LogFile::write_all(const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      error_ = w < 0 ? errno : EIO;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

void LogFile::write(std::string_view data) {
  if (fd_ < 0 || data.empty()) return;
  if (lost_ > 0) {
    // The disk took bytes again: say where the gap is, in the log itself.
    const std::string marker = "\n[launch] " + bytes_text(lost_) + " of output missing here: " +
                               std::strerror(error_) + "\n";
    if (!write_all(marker.data(), marker.size())) {
      lost_ += data.size();
      lost_total_ += data.size();
      return;
    }
    log::info("log " + path_ + " is written again (" + bytes_text(lost_) + " missing in it)");
    lost_ = 0;
  }
  if (write_all(data.data(), data.size())) return;
  if (lost_total_ == 0 || lost_ == 0)
    log::warn("cannot write " + path_ + ": " + std::strerror(error_) +
              "; its output is counted and the log resumes when it can be written");
  lost_ += data.size();
  lost_total_ += data.size();
}

void LogFile::finish() {
  if (lost_total_ > 0)
    log::warn("log " + path_ + " misses " + bytes_text(lost_total_) + " of output (" + std::strerror(error_) + ")");
}

}  // namespace launch
