// Splitting a worker's output stream into whole lines (for `--stream all`, which must never
// interleave two ranks inside one line) and keeping its last lines for the failure report.
// Pure: bytes in, lines out.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace launch {

class LineSplitter {
 public:
  // A line longer than max_line is cut there, so a worker that never writes '\n' cannot make
  // the launcher buffer without bound.
  explicit LineSplitter(size_t max_line = 64 * 1024) : max_line_(max_line) {}

  // Calls on_line for every completed line (without its '\n').
  void feed(std::string_view data, const std::function<void(std::string_view)>& on_line);
  // At end of stream: the unterminated rest, if any, is passed as a last line.
  void finish(const std::function<void(std::string_view)>& on_line);
  const std::string& partial() const { return partial_; }

 private:
  size_t max_line_;
  std::string partial_;
};

class TailLines {
 public:
  explicit TailLines(size_t n = 20) : n_(n) {}
  void push(std::string_view line);
  std::vector<std::string> lines() const { return {lines_.begin(), lines_.end()}; }

 private:
  size_t n_;
  std::deque<std::string> lines_;
};

}  // namespace launch
