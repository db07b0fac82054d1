#include "worker/data/dataset_index.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "worker/data/data_error.h"

namespace worker {

namespace {

int64_t mtime_ns(const struct stat& st) { return int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec; }

std::string absolute(const std::string& p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf)) return p;
  return buf;
}

// Entries of one directory: sub-directories (symlinks followed, as os.walk(followlinks=True))
// and regular files, names sorted bytewise (= Python's str order for UTF-8 names).
struct Listing {
  std::vector<std::string> dirs, files;
  int64_t mtime = 0;
};

Listing list_dir(const std::string& path) {
  Listing out;
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(path.c_str()), ::closedir);
  if (!d) throw DataError("cannot read the folder " + path + ": " + std::strerror(errno));
  struct stat st{};
  if (::fstat(::dirfd(d.get()), &st) == 0) out.mtime = mtime_ns(st);
  while (const dirent* e = ::readdir(d.get())) {
    const char* n = e->d_name;
    if (n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0))) continue;
    unsigned char type = e->d_type;
    if (type == DT_LNK || type == DT_UNKNOWN) {  // only these need a stat
      struct stat s{};
      if (::fstatat(::dirfd(d.get()), n, &s, 0) != 0) continue;  // a dangling link
      type = S_ISDIR(s.st_mode) ? DT_DIR : S_ISREG(s.st_mode) ? DT_REG : DT_UNKNOWN;
    }
    if (type == DT_DIR) out.dirs.emplace_back(n);
    else if (type == DT_REG) out.files.emplace_back(n);
  }
  std::sort(out.dirs.begin(), out.dirs.end());
  std::sort(out.files.begin(), out.files.end());
  return out;
}

std::string join_extensions() {
  std::string s;
  for (const auto& e : image_extensions()) s += (s.empty() ? "" : ", ") + e;
  return s;
}

}  // namespace

const std::vector<std::string>& image_extensions() {
  static const std::vector<std::string> ext{".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"};
  return ext;
}

bool has_image_extension(std::string_view name) {
  for (const auto& e : image_extensions()) {
    if (name.size() < e.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < e.size() && eq; ++i) {
      char c = name[name.size() - e.size() + i];
      if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
      eq = c == e[i];
    }
    if (eq) return true;
  }
  return false;
}

std::string DatasetIndex::path(int64_t i) const {
  std::string_view rel = rel_path(i);
  if (!rel.empty() && rel[0] == '/') return std::string(rel);
  std::string p = root;
  p += '/';
  p += rel;
  return p;
}

void DatasetIndex::add(std::string_view rel, int32_t label) {
  blob.append(rel);
  offsets.push_back(blob.size());
  labels.push_back(label);
}

DatasetIndex scan_image_folder(const std::string& dir) {
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0) throw DataError(dir + ": no such folder");
  if (!S_ISDIR(st.st_mode)) throw DataError(dir + " is not a folder");
  DatasetIndex idx;
  idx.root = absolute(dir);
  Listing top = list_dir(idx.root);
  idx.dirs.emplace_back(idx.root, top.mtime);
  if (top.dirs.empty()) {
    throw DataError(dir + " has no class folders (expected " + dir + "/<class>/<image>, as torchvision's ImageFolder)");
  }
  idx.classes = top.dirs;
  idx.num_classes = int(idx.classes.size());
  std::vector<std::string> empty;
  for (size_t c = 0; c < idx.classes.size(); ++c) {
    // torchvision: for root, _, fnames in sorted(os.walk(class_dir)): for f in sorted(fnames).
    // Walking every folder and sorting the folders' relative paths gives that order.
    std::vector<std::string> pending{idx.classes[c]};
    std::vector<std::pair<std::string, std::vector<std::string>>> folders;  // (relative path, files)
    while (!pending.empty()) {
      std::string rel = std::move(pending.back());
      pending.pop_back();
      Listing l = list_dir(idx.root + "/" + rel);
      idx.dirs.emplace_back(idx.root + "/" + rel, l.mtime);
      for (auto& d : l.dirs) pending.push_back(rel + "/" + d);
      folders.emplace_back(std::move(rel), std::move(l.files));
    }
    std::sort(folders.begin(), folders.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    const size_t before = idx.labels.size();
    for (const auto& [rel, files] : folders) {
      for (const auto& f : files) {
        if (has_image_extension(f)) idx.add(rel + "/" + f, int32_t(c));
      }
    }
    if (idx.labels.size() == before) empty.push_back(idx.classes[c]);
  }
  if (!empty.empty()) {
    std::string names;
    for (size_t i = 0; i < empty.size() && i < 5; ++i) names += (i ? ", " : "") + empty[i];
    if (empty.size() > 5) names += ", ... (" + std::to_string(empty.size()) + " in all)";
    throw DataError(dir + ": class folder(s) with no images: " + names + " (an image ends in one of " +
                    join_extensions() + "; remove the folder or add images)");
  }
  return idx;
}

DatasetIndex read_list_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw DataError(path + ": cannot read the list file (" + std::strerror(errno) + ")");
  DatasetIndex idx;
  const std::string abs = absolute(path);
  idx.root = abs.substr(0, abs.rfind('/'));
  if (idx.root.empty()) idx.root = "/";
  struct stat st{};
  if (::stat(abs.c_str(), &st) == 0) idx.dirs.emplace_back(abs, mtime_ns(st));
  std::string line;
  int64_t lineno = 0, max_label = -1;
  while (std::getline(in, line)) {
    ++lineno;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    const size_t sep = line.find_last_of(" \t");
    auto bad = [&](const std::string& why) {
      return DataError(path + ":" + std::to_string(lineno) + ": " + why + " (each line is `path label`)");
    };
    if (sep == std::string::npos || sep < start) throw bad("no label");
    const std::string lab = line.substr(sep + 1);
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(lab.c_str(), &end, 10);
    if (lab.empty() || *end != 0 || errno != 0 || v < 0 || v > 1000000) {
      throw bad("label '" + lab + "' is not an integer in [0, 1000000]");
    }
    size_t pend = sep;
    while (pend > start && (line[pend - 1] == ' ' || line[pend - 1] == '\t')) --pend;
    idx.add(std::string_view(line).substr(start, pend - start), int32_t(v));
    max_label = std::max<int64_t>(max_label, v);
  }
  if (idx.size() == 0) throw DataError(path + ": the list file has no entries (each line is `path label`)");
  idx.num_classes = int(max_label + 1);
  // A wrong base folder shows at once: the first entries must exist.
  bool any = false;
  for (int64_t i = 0; i < std::min<int64_t>(idx.size(), 8) && !any; ++i) any = ::access(idx.path(i).c_str(), R_OK) == 0;
  if (!any) {
    throw DataError(path + ": its first entries do not exist (e.g. " + idx.path(0) +
                    "); paths are relative to the list file's folder");
  }
  return idx;
}

bool index_is_current(const DatasetIndex& idx) {
  if (idx.dirs.empty()) return false;
  for (const auto& [p, m] : idx.dirs) {
    struct stat st{};
    if (::stat(p.c_str(), &st) != 0 || mtime_ns(st) != m) return false;
  }
  return true;
}

}  // namespace worker
