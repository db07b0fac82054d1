// The console streams (launcher/output.h): never blocking once the job runs, dropping whole
// chunks with a marker, safe from several threads, one stream when stdout and stderr are one
// file, and nothing lost while they may block (before the job).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "launcher/output.h"

using launch::Console;
using launch::ConsoleRole;

namespace {

struct Pipe {
  int r = -1, w = -1;
  explicit Pipe(int size = 0) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    r = fds[0];
    w = fds[1];
    if (size > 0) REQUIRE(fcntl(w, F_SETPIPE_SZ, size) >= size);
  }
  ~Pipe() {
    if (r >= 0) close(r);
    if (w >= 0) close(w);
  }
  // Everything readable now (the read end made non-blocking).
  std::string drain() const {
    fcntl(r, F_SETFL, O_NONBLOCK);
    std::string out;
    char buf[65536];
    ssize_t n;
    while ((n = read(r, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string l;
  while (std::getline(ss, l)) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("console: stdout and stderr on one file are one stream; on two files, two", "[launcher][console]") {
  Pipe a, b;
  auto one = launch::open_console_streams(a.w, a.w);
  CHECK(one.out == one.err);
  const int again = dup(a.w);  // another descriptor of the same pipe: still one stream
  auto dup_one = launch::open_console_streams(a.w, again);
  CHECK(dup_one.out == dup_one.err);
  close(again);
  auto two = launch::open_console_streams(a.w, b.w);
  CHECK(two.out != two.err);
  // Line order across the two is kept in the shared one: output and messages interleave as written.
  one.out->write("output 1\n");
  one.err->write("message 2\n");
  one.out->write("output 3\n");
  CHECK(a.drain() == "output 1\nmessage 2\noutput 3\n");
}

TEST_CASE("console: a full pipe never blocks; what does not fit is dropped whole and marked", "[launcher][console]") {
  for (ConsoleRole role : {ConsoleRole::Output, ConsoleRole::Messages, ConsoleRole::Both}) {
    Pipe p(4096);
    Console c(p.w, role, 8192);
    const std::string line(99, 'x');
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 200; ++i) c.write(line + "\n");  // 20,000 bytes: pipe 4,096 + buffer 8,192
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(2));  // nobody read: no wait
    CHECK(c.pending());
    const uint64_t dropped = c.dropped_bytes();
    CHECK(dropped > 0);
    CHECK(dropped % 100 == 0);  // whole lines only
    c.write("after\n");  // the gap is marked before the next byte
    std::string got = p.drain();
    for (int k = 0; k < 100 && c.pending(); ++k) {  // the reader catches up
      c.flush();
      got += p.drain();
    }
    CHECK_FALSE(c.pending());
    const auto ls = lines(got);
    const std::string marker = "[launch] " + std::to_string(dropped) + " bytes";
    size_t markers = 0, whole = 0;
    for (const auto& l : ls) {
      if (l.rfind(marker, 0) == 0) ++markers;
      if (l == line) ++whole;
    }
    CHECK(markers == 1);
    CHECK(whole + dropped / 100 == 200);
    CHECK(ls.back() == "after");
    CHECK_THAT(got, Catch::Contains(role == ConsoleRole::Messages ? "of launch's messages dropped here"
                                    : role == ConsoleRole::Output ? "of output dropped here"
                                                                  : "dropped here: the console did not keep up"));
  }
}

TEST_CASE("console: lines from several threads arrive whole and in each thread's order", "[launcher][console]") {
  Pipe p;
  auto c = std::make_unique<Console>(p.w, ConsoleRole::Both);
  std::string got;
  std::thread reader([&] {
    char buf[65536];
    ssize_t n;
    while ((n = read(p.r, buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < 4; ++t)
    writers.emplace_back([&c, t] {
      for (int i = 0; i < 5000; ++i) c->write("thread " + std::to_string(t) + " line " + std::to_string(i) + "\n");
    });
  for (auto& w : writers) w.join();
  c->finish(std::chrono::milliseconds(2000));
  CHECK(c->dropped_bytes() == 0);  // a reader that keeps up loses nothing
  // EOF for the reader: our end and the Console's own description of the pipe closed.
  close(p.w);
  p.w = -1;
  c.reset();
  reader.join();
  std::map<int, int> next;
  size_t n = 0;
  for (const auto& l : lines(got)) {
    int t = -1, i = -1;
    REQUIRE(std::sscanf(l.c_str(), "thread %d line %d", &t, &i) == 2);
    CHECK(i == next[t]);
    next[t] = i + 1;
    ++n;
  }
  CHECK(n == 4 * 5000);
}

TEST_CASE("console: while it may block (before the job), a slow reader loses nothing", "[launcher][console]") {
  Pipe p(4096);
  Console c(p.w, ConsoleRole::Messages, 1024);
  c.set_blocking(true);
  std::string got;
  std::thread reader([&] {
    char buf[512];  // slowly: a little at a time
    while (got.size() < 100 * 1000) {
      const ssize_t n = read(p.r, buf, sizeof buf);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  const std::string line(999, 'm');
  for (int i = 0; i < 100; ++i) c.write(line + "\n");  // each 1,000 bytes: the buffer's size
  reader.join();
  CHECK(c.dropped_bytes() == 0);
  CHECK(got.size() == 100 * 1000);
  c.set_blocking(false);
}

TEST_CASE("console: a closed reader ends the stream; its notice waits for report()", "[launcher][console]") {
  std::signal(SIGPIPE, SIG_IGN);  // as the launcher does
  Pipe p;
  Console c(p.w, ConsoleRole::Output);
  close(p.r);
  p.r = -1;
  c.write("nobody\n");  // EPIPE
  c.write("reads\n");
  CHECK(c.dropped_bytes() == 13);
  CHECK_FALSE(c.pending());
}
