// The launcher's own messages: spdlog, "LAUNCH" prefix and a timestamp, on stderr. Kept behind
// plain functions so that only log.cpp compiles spdlog.
//
// Until attach() they go to stderr as spdlog writes it (blocking; unit tests, helpers). After
// attach() they go through the launcher's stderr Console (output.h): written at once while the
// stream takes them, else queued, bounded and never blocking once never_block() was called --
// a stalled `2>&1 | reader` must not freeze the supervisor nor the store's thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace launch {
class Console;
}

namespace launch::log {

void init(const std::string& level);  // debug, info, warning, error
void debug(const std::string& msg);
void info(const std::string& msg);
void warn(const std::string& msg);
void error(const std::string& msg);

// From now on every message (the store's too) goes to `stderr_console`, blocking until
// never_block(): before the job starts nothing else depends on the launcher, and a usage error
// must appear whatever the reader does.
void attach(std::shared_ptr<Console> stderr_console);
// The job is starting (its store, its workers depend on us): messages never wait for a reader.
void never_block();
// Text as it is (no prefix), after the messages queued before it: launch's last words.
void raw(const std::string& text);
// At exit: what is queued, for as long as stderr takes it (giving up after `stall` without
// progress).
void finish(std::chrono::milliseconds stall = std::chrono::milliseconds(250));

}  // namespace launch::log
