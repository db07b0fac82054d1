#include "launcher/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace launch::log {

namespace {

std::shared_ptr<spdlog::logger> shared_logger() {
  static std::shared_ptr<spdlog::logger> l = [] {
    auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
    auto lg = std::make_shared<spdlog::logger>("launch", sink);
    lg->set_pattern("LAUNCH %^%L%$ %Y-%m-%d %H:%M:%S.%e %v");
    lg->set_level(spdlog::level::info);
    lg->flush_on(spdlog::level::trace);
    return lg;
  }();
  return l;
}

spdlog::logger& logger() { return *shared_logger(); }

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

void debug(const std::string& msg) { logger().debug(msg); }
void info(const std::string& msg) { logger().info(msg); }
void warn(const std::string& msg) { logger().warn(msg); }
void error(const std::string& msg) { logger().error(msg); }

}  // namespace launch::log
