#include "worker/data/dataset_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace worker {

namespace {

constexpr char kMagic[8] = {'T', 'R', 'I', 'D', 'X', '0', '0', '1'};

uint64_t fnv1a(const char* p, size_t n, uint64_t h = 0xcbf29ce484222325ULL) {
  for (size_t i = 0; i < n; ++i) h = (h ^ uint8_t(p[i])) * 0x100000001b3ULL;
  return h;
}

// Little-endian writer/reader of the cache payload.
struct Out {
  std::string s;
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i) s.push_back(char(v >> (8 * i)));
  }
  void str(const std::string& v) {
    u64(v.size());
    s += v;
  }
};
struct In {
  const std::string& s;
  size_t pos = 0;
  bool ok = true;
  uint64_t u64() {
    if (pos + 8 > s.size()) return ok = false, 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(s[pos + size_t(i)])) << (8 * i);
    pos += 8;
    return v;
  }
  std::string str() {
    const uint64_t n = u64();
    if (!ok || n > s.size() - pos) return ok = false, std::string();
    std::string v = s.substr(pos, n);
    pos += n;
    return v;
  }
};

bool writable_dir(const std::string& d) { return !d.empty() && ::access(d.c_str(), W_OK | X_OK) == 0; }

bool read_file(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// A temporary file of mkstemp's in the target folder, then rename: concurrent writers never
// clash, not even ranks of different nodes on a shared data folder (a name made of the pid did:
// under launch's PID namespaces every node's ranks are pids 2, 3, ...).
bool write_atomically(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) return false;
  ::fchmod(fd, 0644);  // mkstemp makes it 0600: the other users of a shared data set read it too
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  const bool ok = ::close(fd) == 0 && done == bytes.size() && std::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace

std::vector<std::string> default_cache_dirs(const std::string& log_dir) {
  std::vector<std::string> d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) {
    d.push_back(std::string(x) + "/train_resnet");
  } else if (const char* h = std::getenv("HOME"); h && *h) {
    d.push_back(std::string(h) + "/.cache/train_resnet");
  }
  if (!log_dir.empty()) d.push_back(log_dir);
  return d;
}

std::string serialize_index(const DatasetIndex& idx) {
  Out o;
  o.s.append(kMagic, 8);
  o.str(idx.root);
  o.u64(uint64_t(idx.num_classes));
  o.u64(idx.classes.size());
  for (const auto& c : idx.classes) o.str(c);
  o.u64(idx.dirs.size());
  for (const auto& [p, m] : idx.dirs) {
    o.str(p);
    o.u64(uint64_t(m));
  }
  o.str(idx.blob);
  o.u64(idx.labels.size());
  for (size_t i = 0; i < idx.labels.size(); ++i) {
    o.u64(idx.offsets[i + 1]);
    o.u64(uint64_t(uint32_t(idx.labels[i])));
  }
  o.u64(fnv1a(o.s.data(), o.s.size()));
  return o.s;
}

bool parse_index(const std::string& bytes, DatasetIndex* out) {
  if (bytes.size() < 16 || std::memcmp(bytes.data(), kMagic, 8) != 0) return false;
  In in{bytes};
  in.pos = bytes.size() - 8;
  if (in.u64() != fnv1a(bytes.data(), bytes.size() - 8)) return false;
  in.pos = 8;
  DatasetIndex idx;
  idx.root = in.str();
  idx.num_classes = int(in.u64());
  const uint64_t nc = in.u64();
  for (uint64_t i = 0; in.ok && i < nc; ++i) idx.classes.push_back(in.str());
  const uint64_t nd = in.u64();
  for (uint64_t i = 0; in.ok && i < nd; ++i) {
    std::string p = in.str();
    idx.dirs.emplace_back(std::move(p), int64_t(in.u64()));
  }
  idx.blob = in.str();
  const uint64_t n = in.u64();
  if (!in.ok || n > bytes.size() / 16) return false;
  idx.offsets.reserve(n + 1);
  idx.labels.reserve(n);
  for (uint64_t i = 0; in.ok && i < n; ++i) {
    const uint64_t end = in.u64();
    if (end < idx.offsets.back() || end > idx.blob.size()) return false;
    idx.offsets.push_back(end);
    idx.labels.push_back(int32_t(in.u64()));
  }
  if (!in.ok || in.pos != bytes.size() - 8) return false;
  *out = std::move(idx);
  return true;
}

IndexLoad load_image_folder(const std::string& dir, const std::string& split,
                            const std::vector<std::string>& cache_dirs) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string split_dir = dir + "/" + split;
  char buf[4096];
  const std::string abs = ::realpath(split_dir.c_str(), buf) ? std::string(buf) : split_dir;
  char hash[32];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a(abs.data(), abs.size()));
  // The cache folders first: a data set (often shared, or read-only) gets no files of ours unless
  // no cache folder can be written; an index found beside the data (older versions put it
  // there) is still read.
  std::vector<std::string> candidates;
  for (const auto& d : cache_dirs) candidates.push_back(d + "/train_resnet-index-" + hash + "." + split);
  candidates.push_back(dir + "/.train_resnet-index." + split);

  IndexLoad r;
  auto done = [&] {
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  for (const auto& c : candidates) {
    std::string bytes;
    DatasetIndex idx;
    if (read_file(c, &bytes) && parse_index(bytes, &idx) && idx.root == abs && index_is_current(idx)) {
      r.index = std::move(idx);
      r.from_cache = true;
      r.cache_path = c;
      return done();
    }
  }
  r.index = scan_image_folder(split_dir);
  const std::string bytes = serialize_index(r.index);
  for (const auto& c : candidates) {
    const std::string folder = c.substr(0, c.rfind('/'));
    if (folder != dir) {  // ~/.cache/train_resnet may not exist yet
      ::mkdir(folder.substr(0, folder.rfind('/')).c_str(), 0755);
      ::mkdir(folder.c_str(), 0755);
    }
    if (writable_dir(folder) && write_atomically(c, bytes)) {
      r.cache_path = c;
      break;
    }
  }
  return done();
}

}  // namespace worker
