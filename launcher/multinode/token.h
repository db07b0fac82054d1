// The job token of a multi-node job. A single-node launcher makes a fresh one per run; the nodes
// of a multi-node job must share one, so it comes from the user: --token-file PATH or
// LAUNCH_STORE_TOKEN. Without one the launcher refuses to open its store to the network.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

namespace launch::multinode {

class TokenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How to make a token, quoted in every "no token" error.
inline constexpr const char* kMakeTokenCommand =
    "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > ~/.launch_token && chmod 600 ~/.launch_token";

// The same as a Kubernetes Secret the pods read into LAUNCH_STORE_TOKEN (examples/k8s/secret.sh).
inline constexpr const char* kKubernetesSecretCommand =
    "kubectl create secret generic launch-token --from-literal=token=\"$(head -c 32 /dev/urandom | od -An -tx1 | "
    "tr -d ' \\n')\"";

// Tokens shorter than this are refused: 16 random bytes as hex is the least we accept.
inline constexpr size_t kMinTokenChars = 32;
// The token travels in HELLO and in the environment; far below the store's key limit.
inline constexpr size_t kMaxTokenChars = 1024;
// A token typed by hand ("aaaa...", "abcabc...") is as long as a random one and guessable: its
// estimated entropy must reach this. 32 random hex characters (the shortest token we accept)
// estimate at 100-128 bits; 36 times one letter at 0, "ab" repeated at 36.
inline constexpr double kMinTokenBits = 64;

// The estimate: the token's length times the Shannon entropy of its characters' frequencies.
// It cannot see structure beyond single characters ("abcdefgh" repeated passes), which is why
// the bound is half of what a random token shows.
double token_entropy_bits(const std::string& token);

// The token in PATH: a regular file that only its owner may read (mode & 077 == 0), owned by
// the user running the launcher, holding kMinTokenChars..kMaxTokenChars printable characters
// (a trailing newline is dropped) of at least kMinTokenBits estimated entropy. Throws TokenError
// saying what to fix.
std::string read_token_file(const std::string& path);

// --token-file when given, else the LAUNCH_STORE_TOKEN value (`env_token`, the caller reads the
// environment). Throws TokenError when neither is there, with kMakeTokenCommand in the message.
std::string resolve_job_token(const std::optional<std::string>& token_file,
                              const std::optional<std::string>& env_token);

}  // namespace launch::multinode
