#include "launcher/log.h"

#include <spdlog/details/os.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "launcher/output.h"

namespace launch::log {

namespace {

// spdlog's lines into a Console. base_sink's mutex guards the formatter (the store's thread logs
// too); the Console has its own lock and never logs from inside (output.h), so the two locks are
// always taken in this order.
class ConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ConsoleSink(std::shared_ptr<Console> console)
      : console_(std::move(console)),
        color_(spdlog::details::os::in_terminal(stderr) && spdlog::details::os::is_color_terminal()) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t line;
    formatter_->format(msg, line);
    std::string_view text(line.data(), line.size());
    if (!color_ || msg.color_range_end <= msg.color_range_start) {
      console_->write(text);
      return;
    }
    // The level letter in colour, as spdlog's own colour sink does on a terminal.
    std::string out;
    out.reserve(text.size() + 16);
    out.append(text.substr(0, msg.color_range_start)).append(level_color(msg.level));
    out.append(text.substr(msg.color_range_start, msg.color_range_end - msg.color_range_start)).append("\033[m");
    out.append(text.substr(msg.color_range_end));
    console_->write(out);
  }
  void flush_() override { console_->flush(); }

 private:
  static const char* level_color(spdlog::level::level_enum l) {
    switch (l) {
      case spdlog::level::trace: return "\033[37m";
      case spdlog::level::debug: return "\033[36m";
      case spdlog::level::info: return "\033[32m";
      case spdlog::level::warn: return "\033[33m\033[1m";
      case spdlog::level::err: return "\033[31m\033[1m";
      case spdlog::level::critical: return "\033[1m\033[41m";
      default: return "";
    }
  }
  std::shared_ptr<Console> console_;
  bool color_;
};

constexpr const char* kPattern = "LAUNCH %^%L%$ %Y-%m-%d %H:%M:%S.%e %v";

std::shared_ptr<spdlog::logger> shared_logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto lg = std::make_shared<spdlog::logger>("launch", sink);
    lg->set_pattern(kPattern);
    lg->set_level(spdlog::level::info);
    lg->flush_on(spdlog::level::trace);
    return lg;
  }();
  return l;
}

spdlog::logger& logger() { return *shared_logger(); }

// The attached stream (set once at start-up, before any thread exists).
std::shared_ptr<Console>& attached() {
  static std::shared_ptr<Console> c;
  return c;
}

}  // namespace

void init(const std::string& level) {
  // The store's messages (spdlog's default logger) get the same prefix and go to stderr too:
  // stdout carries the workers' output.
  spdlog::set_default_logger(shared_logger());
  logger().set_level(level == "debug"     ? spdlog::level::debug
                     : level == "warning" ? spdlog::level::warn
                     : level == "error"   ? spdlog::level::err
                                          : spdlog::level::info);
}

void attach(std::shared_ptr<Console> stderr_console) {
  stderr_console->set_blocking(true);
  auto sink = std::make_shared<ConsoleSink>(stderr_console);
  sink->set_pattern(kPattern);
  logger().sinks() = {sink};
  attached() = std::move(stderr_console);
}

void never_block() {
  if (attached()) attached()->set_blocking(false);
}

void raw(const std::string& text) {
  if (attached()) {
    attached()->write(text);
  } else {
    std::fputs(text.c_str(), stderr);
  }
}

void finish(std::chrono::milliseconds stall) {
  if (attached()) attached()->finish(stall);
}

void debug(const std::string& msg) { logger().debug(msg); }
void info(const std::string& msg) { logger().info(msg); }
void warn(const std::string& msg) { logger().warn(msg); }
void error(const std::string& msg) { logger().error(msg); }

}  // namespace launch::log
