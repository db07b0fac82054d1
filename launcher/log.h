// The launcher's own messages: spdlog on stderr, "LAUNCH" prefix and a timestamp. Kept behind
// plain functions so that only log.cpp compiles spdlog.
#pragma once

#include <string>

namespace launch::log {

void init(const std::string& level);  // debug, info, warning, error
void debug(const std::string& msg);
void info(const std::string& msg);
void warn(const std::string& msg);
void error(const std::string& msg);

}  // namespace launch::log
