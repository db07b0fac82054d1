#include "worker/train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace worker {
namespace tb {

namespace {

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // reflected 0x1EDC6F41
    t[i] = c;
  }
  return t;
}

// --- protobuf wire format: the three kinds of field we write

void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out.push_back(char(v));
}

void key(std::string& out, int field, int wire_type) { varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }

void fixed(std::string& out, const void* p, size_t n) {  // x86-64 is little-endian, as the wire
  out.append(static_cast<const char*>(p), n);
}

void bytes_field(std::string& out, int field, const std::string& s) {
  key(out, field, 2);
  varint(out, s.size());
  out += s;
}

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  key(e, 1, 1);  // wall_time: double
  fixed(e, &wall_time, 8);
  if (step != 0) {
    key(e, 2, 0);  // step: int64
    varint(e, uint64_t(step));
  }
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string file_version_event(double wall_time) {
  std::string e = event_head(wall_time, 0);
  bytes_field(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    bytes_field(value, 1, tag);
    key(value, 2, 5);  // simple_value: float
    fixed(value, &v, 4);
    bytes_field(summary, 1, value);
  }
  std::string e = event_head(wall_time, step);
  bytes_field(e, 5, summary);
  return e;
}

std::string tfrecord(const std::string& payload) {
  std::string r;
  const uint64_t len = payload.size();
  fixed(r, &len, 8);
  const uint32_t len_crc = masked_crc32c(&len, 8);
  fixed(r, &len_crc, 4);
  r += payload;
  const uint32_t crc = masked_crc32c(payload.data(), payload.size());
  fixed(r, &crc, 4);
  return r;
}

}  // namespace tb

namespace {
double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

void EventWriter::open(const std::string& dir) {
  if (dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("--tensorboard: cannot create the folder '" + dir + "': " + ec.message());
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const double now = unix_seconds();
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(int64_t(now)) + "." + host + "." +
                                         std::to_string(::getpid())))
              .string();
  file_.open(path_, std::ios::binary | std::ios::trunc);
  if (!file_) throw std::runtime_error("--tensorboard: cannot write '" + path_ + "'");
  file_ << tb::tfrecord(tb::file_version_event(now)) << std::flush;
}

void EventWriter::scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  if (!file_.is_open() || values.empty()) return;
  file_ << tb::tfrecord(tb::scalars_event(unix_seconds(), step, values)) << std::flush;
}

}  // namespace worker
