// safetensors reading and writing.
//
// Format: u64 little-endian N, then N bytes of JSON {"name": {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the data; offsets are
// relative to the start of the data. The header is padded with spaces to a multiple of 8 bytes
// so the data stays aligned (as the reference writer does).
#include "worker/model/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>
#define XXH_INLINE_ALL  // the implementation from the header: no library to link
#include <xxhash.h>

namespace worker {

namespace {

// Headers larger than this are refused before allocating (the reference reader uses 100 MB).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

std::runtime_error st_error(const std::string& path, const std::string& msg) {
  return std::runtime_error("safetensors file '" + path + "': " + msg);
}

size_t st_dtype_size(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

uint64_t numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t s : shape) n *= uint64_t(s);
  return n;
}

// Writes all of buf to fd, or throws.
void write_all(int fd, const void* buf, size_t len, const std::string& path) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    const ssize_t w = ::write(fd, p, len);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw st_error(path, std::string("write failed: ") + std::strerror(errno));
    }
    p += w;
    len -= size_t(w);
  }
}

std::string checksum_of(const std::vector<uint8_t>& data) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(XXH3_64bits(data.data(), data.size())));
  return buf;
}

bool is_checksum_key(const std::string& key) { return key.compare(0, std::strlen(kChecksumPrefix), kChecksumPrefix) == 0; }

std::string dir_of(const std::string& path) {
  const size_t s = path.find_last_of('/');
  if (s == std::string::npos) return ".";
  return s == 0 ? "/" : path.substr(0, s);
}

}  // namespace

std::string shape_string(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// --- Writing

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : metadata) {
    if (!is_checksum_key(k)) meta[k] = v;
  }
  for (const StTensor& t : tensors) meta[kChecksumPrefix + t.name] = checksum_of(t.data);
  if (!meta.empty()) header["__metadata__"] = meta;
  uint64_t offset = 0;
  for (const StTensor& t : tensors) {
    const size_t es = st_dtype_size(t.dtype);
    if (es == 0) throw st_error(path, "tensor '" + t.name + "' has unknown dtype '" + t.dtype + "'");
    if (t.name.empty() || t.name == "__metadata__")
      throw st_error(path, "invalid tensor name '" + t.name + "'");
    if (header.contains(t.name)) throw st_error(path, "duplicate tensor '" + t.name + "'");
    for (int64_t s : t.shape)
      if (s < 0) throw st_error(path, "tensor '" + t.name + "' has a negative dimension");
    if (numel(t.shape) * es != t.data.size())
      throw st_error(path, "tensor '" + t.name + "' has " + std::to_string(t.data.size()) +
                               " bytes, its shape " + shape_string(t.shape) + " needs " +
                               std::to_string(numel(t.shape) * es));
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(h.size()) >> (8 * i));

  // Temporary name in the same folder (rename is atomic only within one file system).
  std::string tmpl = path + ".tmp.XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0)
    throw st_error(path, std::string("cannot create a temporary file in '") + dir_of(path) +
                             "': " + std::strerror(errno));
  const std::string tmp(name.data());
  try {
    write_all(fd, len, 8, path);
    write_all(fd, h.data(), h.size(), path);
    for (const StTensor& t : tensors) write_all(fd, t.data.data(), t.data.size(), path);
    if (::fchmod(fd, 0644) != 0 || ::fsync(fd) != 0)
      throw st_error(path, std::string("fsync failed: ") + std::strerror(errno));
    if (::close(fd) != 0) {
      throw st_error(path, std::string("close failed: ") + std::strerror(errno));
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw st_error(path, std::string("rename failed: ") + std::strerror(e));
  }
  // Make the rename itself durable.
  const int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// --- Reading

std::vector<StTensor> read_safetensors(const std::string& path,
                                       std::map<std::string, std::string>* metadata) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw st_error(path, std::string("cannot open: ") + std::strerror(errno));
  f.seekg(0, std::ios::end);
  const uint64_t file_size = uint64_t(f.tellg());
  f.seekg(0);
  if (file_size < 8) throw st_error(path, "truncated: shorter than the 8-byte header length");
  uint8_t len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(len[i]) << (8 * i);
  if (hlen > kMaxHeaderBytes)
    throw st_error(path, "header length " + std::to_string(hlen) + " exceeds the limit of " +
                             std::to_string(kMaxHeaderBytes) + " bytes");
  if (hlen > file_size - 8)
    throw st_error(path, "truncated: header length " + std::to_string(hlen) +
                             " goes beyond the end of the file (" + std::to_string(file_size) +
                             " bytes)");
  std::string h(size_t(hlen), '\0');
  f.read(h.data(), std::streamsize(hlen));
  if (!f) throw st_error(path, "read error in the header");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(h);
  } catch (const std::exception& e) {
    throw st_error(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) throw st_error(path, "header is not a JSON object");
  const uint64_t data_size = file_size - 8 - hlen;

  struct Pending {
    StTensor t;
    uint64_t begin = 0, end = 0;
  };
  std::vector<Pending> pend;
  std::map<std::string, std::string> checksums;  // tensor name -> the writer's hash
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) throw st_error(path, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) throw st_error(path, "__metadata__ value '" + m.key() + "' is not a string");
        if (is_checksum_key(m.key())) {
          checksums[m.key().substr(std::strlen(kChecksumPrefix))] = m->get<std::string>();
        } else if (metadata) {
          (*metadata)[m.key()] = m->get<std::string>();
        }
      }
      continue;
    }
    const std::string& name = it.key();
    const nlohmann::json& e = *it;
    auto bad = [&](const std::string& msg) { return st_error(path, "tensor '" + name + "': " + msg); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      throw bad("entry needs dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) throw bad("dtype is not a string");
    Pending p;
    p.t.name = name;
    p.t.dtype = e["dtype"].get<std::string>();
    const size_t es = st_dtype_size(p.t.dtype);
    if (es == 0) throw bad("unknown dtype '" + p.t.dtype + "'");
    if (!e["shape"].is_array()) throw bad("shape is not an array");
    for (const auto& s : e["shape"]) {
      if (!s.is_number_unsigned()) throw bad("shape has a non-integer or negative dimension");
      p.t.shape.push_back(s.get<int64_t>());
    }
    const auto& off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw bad("data_offsets is not a pair of non-negative integers");
    p.begin = off[0].get<uint64_t>();
    p.end = off[1].get<uint64_t>();
    if (p.begin > p.end || p.end > data_size)
      throw bad("data_offsets [" + std::to_string(p.begin) + ", " + std::to_string(p.end) +
                "] out of range (data section is " + std::to_string(data_size) +
                " bytes; truncated file?)");
    if (numel(p.t.shape) * es != p.end - p.begin)
      throw bad("shape " + shape_string(p.t.shape) + " of " + p.t.dtype + " needs " +
                std::to_string(numel(p.t.shape) * es) + " bytes, data_offsets span " +
                std::to_string(p.end - p.begin));
    pend.push_back(std::move(p));
  }
  // The tensors must tile the data section exactly (no overlaps, holes or trailing bytes).
  std::sort(pend.begin(), pend.end(), [](const Pending& a, const Pending& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t at = 0;
  for (const Pending& p : pend) {
    if (p.begin != at)
      throw st_error(path, "tensor '" + p.t.name + "': data_offsets overlap or leave a gap at byte " +
                               std::to_string(at));
    at = p.end;
  }
  if (at != data_size)
    throw st_error(path, "data section has " + std::to_string(data_size) + " bytes, tensors cover " +
                             std::to_string(at));

  // Ours carry a checksum per tensor: then every tensor must have its own, and nothing else.
  if (!checksums.empty()) {
    for (const Pending& p : pend) {
      if (!checksums.count(p.t.name)) {
        throw st_error(path, "tensor '" + p.t.name + "' has no checksum while the others have (a corrupt header?)");
      }
    }
    if (checksums.size() != pend.size()) {
      for (const auto& [name, sum] : checksums) {
        bool held = false;
        for (const Pending& p : pend) held = held || p.t.name == name;
        if (!held) throw st_error(path, "a checksum names tensor '" + name + "', which the file does not hold (a corrupt header?)");
      }
    }
  }
  std::vector<StTensor> out;
  out.reserve(pend.size());
  for (Pending& p : pend) {
    p.t.data.resize(size_t(p.end - p.begin));
    if (!p.t.data.empty()) f.read(reinterpret_cast<char*>(p.t.data.data()), std::streamsize(p.t.data.size()));
    if (!f) throw st_error(path, "tensor '" + p.t.name + "': read error");
    if (!checksums.empty()) {
      const std::string& stored = checksums[p.t.name];
      const std::string computed = checksum_of(p.t.data);
      if (stored != computed) {
        throw st_error(path, "tensor '" + p.t.name + "': its bytes do not match the checksum written with them (xxh3_64 " +
                                 stored + ", the bytes hash to " + computed +
                                 "): the file is corrupt (a flipped bit, a bad disk or copy); restore it or use "
                                 "another checkpoint");
      }
    }
    out.push_back(std::move(p.t));
  }
  return out;
}

}  // namespace worker
