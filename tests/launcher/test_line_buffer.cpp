#include <catch2/catch.hpp>

#include "launcher/line_buffer.h"

using namespace launch;

namespace {
std::vector<std::string> feed_all(LineSplitter& s, const std::vector<std::string>& chunks) {
  std::vector<std::string> out;
  for (const auto& c : chunks) s.feed(c, [&](std::string_view l) { out.emplace_back(l); });
  return out;
}
using V = std::vector<std::string>;
}  // namespace

TEST_CASE("line splitter joins lines split across reads", "[launcher][lines]") {
  LineSplitter s;
  CHECK(feed_all(s, {"ab", "c\nde", "f\n\ng"}) == V{"abc", "def", ""});
  CHECK(s.partial() == "g");
  std::vector<std::string> rest;
  s.finish([&](std::string_view l) { rest.emplace_back(l); });
  CHECK(rest == V{"g"});
  CHECK(s.partial().empty());
}

TEST_CASE("line splitter cuts a line longer than its bound", "[launcher][lines]") {
  LineSplitter s(4);
  CHECK(feed_all(s, {"abcdefghij\nxy\n"}) == V{"abcd", "efgh", "ij", "xy"});
  LineSplitter t(4);
  CHECK(feed_all(t, {"ab", "cdef\n"}) == V{"abcd", "ef"});
}

TEST_CASE("tail keeps the last n lines", "[launcher][lines]") {
  TailLines t(3);
  for (int i = 0; i < 10; ++i) t.push("line " + std::to_string(i));
  CHECK(t.lines() == V{"line 7", "line 8", "line 9"});
  TailLines empty(0);
  empty.push("x");
  CHECK(empty.lines().empty());
}
