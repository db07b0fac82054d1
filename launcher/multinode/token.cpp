#include "launcher/multinode/token.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace launch::multinode {
namespace {

// Closes the descriptor on every path out of read_token_file.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", unsigned(m & 07777));
  return buf;
}

std::string check_token_text(std::string text, const std::string& source) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ' ||
                           text.back() == '\t'))
    text.pop_back();
  if (text.empty())
    throw TokenError(source + " is empty; make a token with: " + kMakeTokenCommand);
  for (unsigned char c : text)
    if (c <= 0x20 || c >= 0x7f)
      throw TokenError(source + " holds a space or non-printable character; a token is one word "
                       "of printable ASCII (make one with: " + kMakeTokenCommand + ")");
  if (text.size() < kMinTokenChars)
    throw TokenError(source + " holds " + std::to_string(text.size()) + " characters; a token needs at least " +
                     std::to_string(kMinTokenChars) + " (make one with: " + kMakeTokenCommand + ")");
  if (text.size() > kMaxTokenChars)
    throw TokenError(source + " holds " + std::to_string(text.size()) + " characters; a token has at most " +
                     std::to_string(kMaxTokenChars));
  if (const double bits = token_entropy_bits(text); bits < kMinTokenBits) {
    char est[32];
    std::snprintf(est, sizeof est, "%.0f", bits);
    throw TokenError(source + " is guessable: " + std::to_string(text.size()) + " characters, but about " + est +
                     " bits of entropy (at least " + std::to_string(int(kMinTokenBits)) +
                     " needed); make a random one with: openssl rand -hex 32, or " + kMakeTokenCommand);
  }
  return text;
}

}  // namespace

double token_entropy_bits(const std::string& token) {
  size_t count[256] = {};
  for (unsigned char c : token) ++count[c];
  double per_char = 0;
  for (size_t n : count)
    if (n > 0) {
      const double p = double(n) / double(token.size());
      per_char -= p * std::log2(p);
    }
  return per_char * double(token.size());
}

std::string read_token_file(const std::string& path) {
  // Open first, then fstat the open file: what we check is what we read.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)};
  if (f.fd < 0)
    throw TokenError("--token-file " + path + ": cannot open (" + std::strerror(errno) +
                     "); make one with: " + kMakeTokenCommand);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw TokenError("--token-file " + path + ": cannot stat (" + std::strerror(errno) + ")");
  if (!S_ISREG(st.st_mode))
    throw TokenError("--token-file " + path + " is not a regular file");
  if (st.st_uid != ::geteuid())
    throw TokenError("--token-file " + path + " belongs to uid " + std::to_string(st.st_uid) +
                     ", not to you (uid " + std::to_string(::geteuid()) + "); use a token file of your own");
  if ((st.st_mode & 077) != 0)
    throw TokenError("--token-file " + path + " is accessible by group or others (mode " +
                     octal_mode(st.st_mode) + "); run: chmod 600 " + path);
  if (size_t(st.st_size) > kMaxTokenChars + 2)
    throw TokenError("--token-file " + path + " is " + std::to_string(st.st_size) +
                     " bytes; a token has at most " + std::to_string(kMaxTokenChars) + " characters");

  std::string text;
  char buf[512];
  for (;;) {
    ssize_t n = ::read(f.fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw TokenError("--token-file " + path + ": read failed (" + std::strerror(errno) + ")");
    if (n == 0) break;
    text.append(buf, size_t(n));
    if (text.size() > kMaxTokenChars + 2)  // the file grew since fstat
      throw TokenError("--token-file " + path + " is longer than " + std::to_string(kMaxTokenChars) + " characters");
  }
  return check_token_text(std::move(text), "--token-file " + path);
}

std::string resolve_job_token(const std::optional<std::string>& token_file,
                              const std::optional<std::string>& env_token) {
  if (token_file) return read_token_file(*token_file);
  if (env_token) return check_token_text(*env_token, "LAUNCH_STORE_TOKEN");
  throw TokenError(std::string("a multi-node job needs a token shared by all nodes: give --token-file PATH (make "
                               "one with: ") + kMakeTokenCommand + "), or set LAUNCH_STORE_TOKEN (on Kubernetes from a "
                               "Secret: " + kKubernetesSecretCommand + ", and in the pod's env: LAUNCH_STORE_TOKEN "
                               "valueFrom secretKeyRef name launch-token key token)");
}

}  // namespace launch::multinode
