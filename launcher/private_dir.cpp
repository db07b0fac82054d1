#include "launcher/private_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "launcher/errors.h"

namespace launch {

namespace {

std::string kind_of(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISLNK(m)) return "a symbolic link";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a directory";
}

}  // namespace

std::string private_dir(const std::string& path, const std::string& way_out) {
  if (mkdir(path.c_str(), 0700) < 0 && errno != EEXIST) throw SystemError("mkdir " + path, errno);
  struct stat st;
  SYS_CHECK(lstat(path.c_str(), &st));  // a symlink is judged, not followed
  const std::string tail = way_out.empty() ? "" : "; " + way_out;
  if (!S_ISDIR(st.st_mode))
    throw UsageError(path + " is " + kind_of(st.st_mode) + ", not a directory of yours" +
                     (st.st_uid == geteuid() ? " (remove it: rm " + path + ")" : " (uid " + std::to_string(st.st_uid) +
                                                                                      " made it)") +
                     tail);
  if (st.st_uid != geteuid())
    throw UsageError(path + " belongs to uid " + std::to_string(st.st_uid) + ", not to you (uid " +
                     std::to_string(geteuid()) + ")" + tail);
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", unsigned(st.st_mode & 07777));
    throw UsageError(path + " may be used by group or others (mode " + mode + "): chmod 700 " + path);
  }
  return path;
}

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && t[0] == '/' ? std::string(t) : std::string("/tmp");
}

}  // namespace launch
