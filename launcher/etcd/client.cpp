#include "launcher/etcd/client.h"

#include <poll.h>

#include <cerrno>

#include "launcher/etcd/http.h"
#include "launcher/seconds.h"

namespace launch::etcd {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using Kind = EtcdError::Kind;

namespace {

constexpr int kGrpcNotFound = 5;

ms remaining(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<ms>(deadline - Clock::now());
  return d.count() < 0 ? ms(0) : d;
}

}  // namespace

struct Client::Impl {
  Options opts;
  std::string url;
  Http http;           // refers to opts: Impl never moves
  std::string prefix;  // "/v3" or "/v3beta", once the server's version is known

  explicit Impl(Options o) : opts(std::move(o)), url(endpoint_url(opts)), http(opts, url) {}

  // A parser's complaint about an answer, as the client's error.
  template <class F>
  auto parsed(const std::string& what, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const GatewayFormatError& e) {
      throw make_error(opts, Kind::Protocol, what, e.what());
    }
  }

  std::string version(ms timeout) {
    const std::string what = "GET /version";
    std::string body = http.call("/version", nullptr, timeout, what);
    std::string v = parsed(what, [&] { return parse_version(body); });
    try {
      prefix = api_prefix(v);
    } catch (const GatewayFormatError& e) {
      throw make_error(opts, Kind::Invalid, what, e.what());
    }
    return v;
  }

  const std::string& api() {
    if (prefix.empty()) version(opts.timeout);
    return prefix;
  }

  std::string post(const char* rpc, const std::string& body, const std::string& what) {
    return http.call(api() + rpc, &body, opts.timeout, what);
  }

  // The first line of a streamed RPC that answers once per request (/lease/keepalive).
  std::string first_line(const char* rpc, const std::string& body, const std::string& what) {
    std::string line;
    Http::StreamEnd end = http.stream(api() + rpc, body, opts.timeout, what, [&](std::string_view l) {
      line = std::string(l);
      return false;
    });
    if (end == Http::StreamEnd::TimedOut) throw make_error(opts, Kind::Timeout, what, "within the call's timeout");
    if (end == Http::StreamEnd::Closed && line.empty())
      throw make_error(opts, Kind::Protocol, what, "the stream ended without an answer");
    throw_if_error(line, what);
    return line;
  }

  void throw_if_error(std::string_view line, const std::string& what) {
    if (auto st = parse_error(line))
      throw make_error(opts, Kind::Server, what, st->message + " (gRPC code " + std::to_string(st->code) + ")", st->code);
  }
};

Client::Client(Options opts) : impl_(std::make_unique<Impl>(std::move(opts))) {}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

const Options& Client::options() const { return impl_->opts; }
const std::string& Client::url() const { return impl_->url; }
void Client::set_timeout(ms timeout) { impl_->opts.timeout = timeout; }

std::string Client::server_version() { return impl_->version(impl_->opts.timeout); }

void Client::wait_ready(ms timeout, ms retry_every) {
  const auto deadline = Clock::now() + timeout;
  const Options& o = impl_->opts;
  for (;;) {
    std::string last;
    try {
      impl_->version(std::min(o.timeout, std::max(remaining(deadline), ms(1))));
      return;
    } catch (const EtcdError& e) {
      if (e.kind() != Kind::Connection && e.kind() != Kind::Timeout) throw;
      last = e.what();
    }
    if (remaining(deadline) <= retry_every)
      throw EtcdError(Kind::Timeout, "etcd at " + o.endpoint + " did not answer within " +
                                         seconds_text(double(timeout.count()) / 1000.0) + " s (asked every " +
                                         seconds_text(double(retry_every.count()) / 1000.0) + " s); the last attempt: " + last);
    // The pause between attempts also ends on the cancel hook.
    pollfd p{o.cancel_fd, POLLIN, 0};
    int pr = ::poll(&p, o.cancel_fd >= 0 ? 1 : 0, int(retry_every.count()));
    if (pr > 0 && (p.revents & POLLIN) && o.cancelled && o.cancelled())
      throw make_error(o, Kind::Cancelled, "GET /version", "");
  }
}

// --- Keys ---
int64_t Client::put(std::string_view key, std::string_view value, int64_t lease) {
  const std::string what = "put of '" + printable(key) + "'";
  std::string body = impl_->post("/kv/put", put_body(key, value, lease), what);
  return impl_->parsed(what, [&] { return parse_put(body); });
}

RangeResponse Client::range(std::string_view key, std::string_view range_end, int64_t revision) {
  const std::string what = "range of " + describe_range(key, range_end);
  std::string body = impl_->post("/kv/range", range_body(key, range_end, revision), what);
  return impl_->parsed(what, [&] { return parse_range(body); });
}

std::optional<KeyValue> Client::get(std::string_view key) {
  RangeResponse r = range(key);
  for (KeyValue& kv : r.kvs)
    if (kv.key == key) return std::move(kv);
  return std::nullopt;
}

int64_t Client::delete_range(std::string_view key, std::string_view range_end) {
  const std::string what = "delete of " + describe_range(key, range_end);
  std::string body = impl_->post("/kv/deleterange", delete_range_body(key, range_end), what);
  return impl_->parsed(what, [&] { return parse_delete_range(body); });
}

TxnResponse Client::txn(const Txn& t) {
  std::string first = !t.compare.empty() ? t.compare[0].key : !t.success.empty() ? t.success[0].key : "";
  const std::string what = "transaction on '" + printable(first) + "'";
  std::string body = impl_->post("/kv/txn", txn_body(t), what);
  return impl_->parsed(what, [&] { return parse_txn(body); });
}

// --- Leases ---
LeaseGrant Client::grant_lease(int64_t ttl_s) {
  const std::string what = "lease grant (TTL " + std::to_string(ttl_s) + " s)";
  if (ttl_s <= 0) throw make_error(impl_->opts, Kind::Invalid, what, "a TTL must be positive");
  std::string body = impl_->post("/lease/grant", lease_grant_body(ttl_s), what);
  return impl_->parsed(what, [&] { return parse_lease_grant(body); });
}

int64_t Client::keep_alive(int64_t lease) {
  const std::string what = "keep-alive of " + lease_name(lease);
  std::string line = impl_->first_line("/lease/keepalive", lease_id_body(lease), what);
  return impl_->parsed(what, [&] { return parse_keepalive_line(line); });
}

bool Client::revoke(int64_t lease) {
  const std::string what = "revoke of " + lease_name(lease);
  try {
    std::string body = impl_->post("/lease/revoke", lease_id_body(lease), what);
    impl_->parsed(what, [&] { parse_lease_revoke(body); });
    return true;
  } catch (const EtcdError& e) {
    if (e.kind() == Kind::Server && e.grpc_code() == kGrpcNotFound) return false;
    throw;
  }
}

// --- Watch ---
WatchResult Client::wait_for_change(std::string_view key, std::string_view range_end, int64_t after_revision,
                                    ms timeout) {
  const std::string what = "watch of " + describe_range(key, range_end) + " after revision " + std::to_string(after_revision);
  if (after_revision < 0) throw make_error(impl_->opts, Kind::Invalid, what, "a revision cannot be negative");
  WatchResult result;
  bool created = false;
  const std::string body = watch_body(key, range_end, after_revision == 0 ? 0 : after_revision + 1);
  Http::StreamEnd end = impl_->http.stream(impl_->api() + "/watch", body, timeout, what, [&](std::string_view line) {
    impl_->throw_if_error(line, what);
    WatchMessage m = impl_->parsed(what, [&] { return parse_watch_line(line); });
    if (m.revision) result.revision = m.revision;
    created = created || m.created;
    if (m.canceled) {
      if (m.compact_revision == 0)
        throw make_error(impl_->opts, Kind::Server, what, "etcd cancelled the watch: " + m.cancel_reason);
      result.outcome = WatchResult::Outcome::Compacted;
      result.compact_revision = m.compact_revision;
      return false;
    }
    if (m.events.empty()) return true;  // the confirmation, or a progress note
    result.outcome = WatchResult::Outcome::Changed;
    result.events = std::move(m.events);
    return false;
  });
  switch (end) {
    case Http::StreamEnd::Stopped:
      return result;
    case Http::StreamEnd::TimedOut:
      if (!created) throw make_error(impl_->opts, Kind::Timeout, what, "(no confirmation of the watch) within the timeout");
      result.outcome = WatchResult::Outcome::TimedOut;
      return result;
    case Http::StreamEnd::Closed:
      break;
  }
  throw make_error(impl_->opts, Kind::Connection, what, "etcd ended the watch before anything changed");
}

}  // namespace launch::etcd
