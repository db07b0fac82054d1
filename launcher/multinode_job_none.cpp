// Built when launcher/multinode (or the store it needs) is not in the tree: a multi-node job is
// refused with a clear message; everything single-node works as before.
#include "launcher/errors.h"
#include "launcher/multinode_job.h"

namespace launch {

std::unique_ptr<MultinodeJob> MultinodeJob::join(const MultinodeConfig&) {
  throw UsageError("this launch was built without multi-node support (launcher/multinode); use --nnodes 1");
}

std::string route_source_address(const std::string& ip) { return ip; }
std::string resolve_ipv4(const std::string& host) { return host; }
std::string resolve_multinode_token(const std::optional<std::string>&, const EnvMap&) {
  throw UsageError("this launch was built without multi-node support (launcher/multinode); use --nnodes 1");
}

}  // namespace launch
