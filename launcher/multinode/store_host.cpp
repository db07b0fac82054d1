#include "launcher/multinode/store_host.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "launcher/errors.h"
#include "launcher/log.h"
#include "launcher/net_address.h"
#include "launcher/seconds.h"
#include "store/store_server.h"
#include "proto/address.h"

namespace launch {

namespace {

using Clock = std::chrono::steady_clock;

// How often a name that does not resolve yet is looked up again, each failure one log line.
constexpr std::chrono::milliseconds kResolveRetry{1000};

double seconds_left(Clock::time_point deadline) {
  return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count());
}

}  // namespace

std::string resolve_master_host(const std::string& host, const Plan& p, StopSignals& stops, Clock::time_point deadline) {
  const auto start = Clock::now();
  for (;;) {
    std::string why;
    if (auto ip = resolve_host(host, &why)) {
      if (Clock::now() - start > kResolveRetry) log::info("rendezvous: '" + host + "' resolves to " + *ip + " now");
      return *ip;
    }
    const double left = seconds_left(deadline);
    if (left <= 0)
      throw std::runtime_error("rendezvous timed out after " + seconds_text(p.opt.elastic_timeout_s) +
                               " s: the host '" + host + "' of " + p.master_origin + " does not resolve (" + why +
                               "); check the name, or raise --elastic_timeout");
    log::info("rendezvous: the host '" + host + "' of " + p.master_origin + " does not resolve yet (" + why +
              "); trying again in " + seconds_text(std::chrono::duration<double>(kResolveRetry).count()) +
              " s, for up to " + seconds_text(std::round(left)) + " s more");
    const int wait_ms = static_cast<int>(std::min<double>(kResolveRetry.count(), left * 1000) + 1);
    stops.wait_readable(-1, wait_ms, "resolving --master");
  }
}

namespace {

enum class Role { Auto, Serve, Join };

Role store_role(const Plan& p) {
  if (p.opt.rdzv.is_host) return *p.opt.rdzv.is_host ? Role::Serve : Role::Join;
  return p.opt.rank >= 1 ? Role::Join : Role::Auto;
}

}  // namespace

MeetingPoint meet_at_master(const Plan& p, StopSignals& stops, Clock::time_point deadline) {
  const std::optional<proto::HostPort> m = proto::split_host_port(p.master);
  if (!m) throw UsageError(p.master_origin + " '" + p.master + "' must be HOST:PORT, e.g. 10.0.0.1:29400");
  MeetingPoint mp;
  mp.master_ip = resolve_master_host(m->host, p, stops, deadline);
  mp.master = proto::join_host_port(mp.master_ip, m->port);
  mp.host = p.opt.host_given ? p.opt.host : route_source_address(mp.master_ip);

  const Role role = store_role(p);
  if (role == Role::Join) return mp;
  try {
    auto presence = std::make_shared<multinode::Presence>();
    auto seen = [presence](const std::string& name, bool open) {
      presence->on_client(name, open, multinode::Presence::Clock::now());
    };
    mp.store = start_shared_job_store(mp.master_ip, p.job.job_id, m->port, p.token, seen);
    mp.presence = presence;
    mp.serves = true;
    log::info("rendezvous: serving the job's store on " + mp.master);
    return mp;
  } catch (const store::ListenError& e) {
    const int err = e.errno_value();
    const bool elsewhere = err == EADDRNOTAVAIL;
    if (role == Role::Auto && err == EADDRINUSE) {
      log::info("rendezvous: " + mp.master + " is taken on this host (another launch serves the store there): "
                "joining it");
      return mp;
    }
    if (role == Role::Auto && elsewhere && p.opt.rank == -1) return mp;  // the store's host is another
    const std::string why = role == Role::Serve ? "--rdzv-conf is_host=1" : "--rank 0";
    if (elsewhere)
      throw UsageError(why + " serves the job's store on " + p.master_origin + " " + mp.master + ", but " +
                       mp.master_ip + " is not an address of this host: start it on that host, or leave " + why +
                       " out to join the store there");
    throw UsageError(why + ": cannot serve the job's store on " + p.master_origin + " " + mp.master + ": " +
                     std::strerror(err) + (err == EADDRINUSE ? " (another program holds the port: pick another)" : ""));
  }
}

}  // namespace launch
