#include "launcher/multinode/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <unistd.h>

#include <cstdio>

#include "launcher/multinode/keys.h"

namespace launch::multinode {
namespace {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using Kind = proto::StoreError::Kind;

std::string seconds_text(ms d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, d < ms(10000) ? "%.1f s" : "%.0f s", double(d.count()) / 1000.0);
  return buf;
}

ms left(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<ms>(deadline - Clock::now());
  return d.count() > 0 ? d : ms(1);  // a store call needs a positive timeout
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

// Slurm's host names with their IPv4 addresses, so that the timeout message can tell which hosts
// arrived whatever name (short, FQDN) or address they registered under.
std::vector<ExpectedHost> resolve_hosts(const std::vector<std::string>& names) {
  std::vector<ExpectedHost> out;
  for (const auto& name : names) {
    ExpectedHost h{name, {}};
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) == 0) {
      for (addrinfo* a = res; a; a = a->ai_next) {
        char buf[INET_ADDRSTRLEN];
        ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr, buf, sizeof buf);
        h.addresses.push_back(buf);
      }
      ::freeaddrinfo(res);
    }
    out.push_back(std::move(h));
  }
  return out;
}

// A store error other than a timeout ends the rendezvous at once, saying what we were doing.
[[noreturn]] void fail(const proto::StoreError& e, const std::string& doing) {
  switch (e.kind()) {
    case Kind::Cancelled:
      throw e;  // a stop signal: the caller's to handle
    case Kind::Refused:
      throw RendezvousError(doing + ": " + e.what() +
                            " (every node needs the same --job_id and token: --token-file or LAUNCH_STORE_TOKEN)");
    case Kind::JobFailed:
      throw RendezvousError(doing + ": the store reports the job as failed: " + e.what());
    default:
      throw RendezvousError(doing + ": " + e.what());
  }
}

}  // namespace

std::string make_node_id() {
  unsigned char raw[8] = {};
  if (::getrandom(raw, sizeof raw, 0) != ssize_t(sizeof raw)) throw RendezvousError("getrandom failed");
  char hex[17];
  for (size_t i = 0; i < sizeof raw; ++i) std::snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  return host_name() + "/" + std::to_string(::getpid()) + "/" + hex;
}

JobLayout rendezvous(const RendezvousConfig& cfg) {
  const auto start = Clock::now();
  const auto deadline = start + cfg.timeout;
  const int g = cfg.generation;

  NodeRegistration self = cfg.self;
  if (self.id.empty()) self.id = make_node_id();
  if (self.hostname.empty()) self.hostname = host_name();
  validate_registration(self, cfg.nnodes);  // a bad --rank fails here, before it is published
  const std::string mine = encode_registration(self);

  proto::ClientOptions opts = cfg.store;
  // Node 0 may start after us: keep knocking on its store for as long as we would wait anyway.
  opts.connect_timeout = cfg.timeout;
  if (opts.client_name.empty()) opts.client_name = "launcher of " + self.hostname + " (" + self.host + ")";
  proto::Client client(opts);

  // --- Claim an arrival slot ---
  // ADD hands out the arrival order; the record is then written with COMPARE_SET so that the
  // slot is ours alone even if an ADD was retried after a dropped connection (ADD is not
  // idempotent; a stale slot then simply stays behind ours).
  int arrival = -1;
  try {
    int64_t a = client.add(arrivals_key(g), 1, left(deadline)) - 1;
    for (;; ++a) {
      if (a >= cfg.nnodes)
        throw LayoutError("more nodes than --nnodes " + std::to_string(cfg.nnodes) + " registered: " +
                          self.hostname + " (" + self.host + ") arrived as node #" + std::to_string(a + 1) +
                          " (do two jobs share --master and --job_id, or do the nodes disagree on --nnodes?)");
      std::string now = client.compare_set(node_key(g, int(a)), "", mine, left(deadline));
      if (now == mine) break;
    }
    arrival = int(a);
  } catch (const proto::StoreError& e) {
    if (e.kind() != Kind::Timeout) fail(e, "registering with the store at " + opts.address);
    throw RendezvousError("rendezvous timed out after " + seconds_text(cfg.timeout) +
                          ": could not register with the store at " + opts.address + " (" + e.what() +
                          "); is the node that serves --master running?");
  }

  // --- Wait for everyone ---
  std::vector<std::string> keys;
  for (int i = 0; i < cfg.nnodes; ++i) keys.push_back(node_key(g, i));
  try {
    client.wait(keys, left(deadline));
  } catch (const proto::StoreError& e) {
    if (e.kind() == Kind::Cancelled) throw;
    if (e.kind() == Kind::Connection)
      throw RendezvousError("rendezvous failed: the store at " + opts.address +
                            " went away while this node waited for the other nodes (its launcher, the "
                            "node of --master, timed out or failed: see its log): " + e.what());
    if (e.kind() != Kind::Timeout) fail(e, "waiting for the other nodes");
    // Name who is missing: read what did arrive (never blocks: CHECK first, GET only those).
    std::vector<NodeRegistration> arrived;
    try {
      auto present = client.check(keys, ms(5000));
      for (size_t i = 0; i < keys.size(); ++i)
        if (present[i]) arrived.push_back(decode_registration(client.get(keys[i], ms(5000))));
    } catch (const proto::StoreError& e2) {
      if (e2.kind() == Kind::Cancelled) throw;
      throw RendezvousError("rendezvous timed out after " + seconds_text(cfg.timeout) + " waiting for " +
                            std::to_string(cfg.nnodes) + " nodes (" + e.what() +
                            "); listing the arrived nodes failed too: " + e2.what());
    } catch (const std::exception& e2) {
      throw RendezvousError("rendezvous timed out after " + seconds_text(cfg.timeout) +
                            " waiting for " + std::to_string(cfg.nnodes) + " nodes (" + e.what() +
                            "); listing the arrived nodes failed too: " + e2.what());
    }
    std::chrono::duration<double> waited = Clock::now() - start;
    throw RendezvousError(describe_missing(cfg.nnodes, arrived, resolve_hosts(cfg.expected_hosts), waited.count()));
  }

  // --- Everyone is here: every node computes the same layout from the same records ---
  std::vector<NodeRegistration> records;
  try {
    for (const auto& v : client.multi_get(keys, left(deadline))) records.push_back(decode_registration(v));
  } catch (const proto::StoreError& e) {
    fail(e, "reading the node records");
  }
  JobLayout layout = compute_layout(records, cfg.nnodes, size_t(arrival), g);
  layout.store_address = opts.address;
  return layout;
}

}  // namespace launch::multinode
