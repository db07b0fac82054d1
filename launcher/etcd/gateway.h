// The JSON of etcd's v3 gateway (gRPC-gateway over HTTP/1.1; etcd 3.3 serves it under /v3beta,
// 3.4 and later under /v3): the request bodies the client sends and the answers it reads. Pure:
// no sockets, no libcurl; every parser takes the text etcd sent and either returns the values or
// throws GatewayFormatError saying what was wrong with it.
//
// What the gateway does, as etcd 3.4.23 answers (checked against Debian's etcd-server):
// - keys and values are base64 (they are `bytes` in rpc.proto); int64 fields come as JSON
//   strings ("revision":"7"); fields at their zero value are left out ("kvs" of an empty range,
//   "count":0, "succeeded":false, a lease's "TTL" once it is gone).
// - a failed unary call answers an HTTP error status with {"error","message","code"} (code: the
//   gRPC status, e.g. 5 NOT_FOUND for an unknown lease, 11 OUT_OF_RANGE for a compacted
//   revision); a streamed one (keepalive, watch) answers 200 and, as its line,
//   {"error":{"grpc_code","http_code","message","http_status"}}.
// - the streams (/lease/keepalive, /watch) answer one JSON object per line, each wrapped as
//   {"result": ...}. A watch stays open after the request body ends.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace launch::etcd {

// The text was not what the gateway sends (not JSON, a field of the wrong type, bad base64).
class GatewayFormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --- Values (mvccpb.KeyValue and the etcdserverpb messages, reduced to what we use) ---
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // the revision that created it (0: absent)
  int64_t mod_revision = 0;     // the revision of its last write
  int64_t version = 0;          // writes since it was created
  int64_t lease = 0;            // 0: none
  bool operator==(const KeyValue& o) const;
};

struct RangeResponse {
  int64_t revision = 0;  // the store's revision when it answered (header.revision)
  std::vector<KeyValue> kvs;
  int64_t count = 0;     // keys in the range (may exceed kvs.size() with a limit)
  bool more = false;
};

enum class CompareTarget { Version, Create, Mod, Value, Lease };
enum class CompareResult { Equal, Greater, Less, NotEqual };

struct Compare {
  std::string key;
  CompareTarget target = CompareTarget::Version;
  CompareResult result = CompareResult::Equal;
  int64_t number = 0;   // Version, Create, Mod, Lease
  std::string value;    // Value
};

struct RequestOp {
  enum class Type { Put, Range, DeleteRange };
  Type type = Type::Range;
  std::string key;
  std::string range_end;  // Range, DeleteRange: "" one key; see prefix_end
  std::string value;      // Put
  int64_t lease = 0;      // Put

  static RequestOp put(std::string key, std::string value, int64_t lease = 0);
  static RequestOp range(std::string key, std::string range_end = "");
  static RequestOp delete_range(std::string key, std::string range_end = "");
};

struct Txn {
  std::vector<Compare> compare;  // all must hold for `success` to run, else `failure` runs
  std::vector<RequestOp> success;
  std::vector<RequestOp> failure;
};

struct ResponseOp {
  RequestOp::Type type = RequestOp::Type::Range;
  RangeResponse range;  // Range
  int64_t deleted = 0;  // DeleteRange
};

struct TxnResponse {
  bool succeeded = false;
  int64_t revision = 0;
  std::vector<ResponseOp> responses;  // one per op of the branch that ran
};

struct LeaseGrant {
  int64_t id = 0;
  int64_t ttl = 0;  // seconds, as etcd granted it (it raises a TTL below its minimum)
};

enum class EventType { Put, Delete };
struct Event {
  EventType type = EventType::Put;
  KeyValue kv;  // Delete: key and mod_revision (the deletion's revision) only
};

// One line of a watch stream.
struct WatchMessage {
  int64_t revision = 0;
  bool created = false;
  bool canceled = false;
  int64_t compact_revision = 0;  // canceled because the start revision is compacted
  std::string cancel_reason;
  std::vector<Event> events;
};

// A gRPC status carried in an answer instead of a result.
struct GrpcStatus {
  int code = 0;
  std::string message;
};

// --- Request bodies ---
std::string put_body(std::string_view key, std::string_view value, int64_t lease);
// revision 0: the latest.
std::string range_body(std::string_view key, std::string_view range_end, int64_t revision);
std::string delete_range_body(std::string_view key, std::string_view range_end);
std::string txn_body(const Txn& txn);
std::string lease_grant_body(int64_t ttl_s);
std::string lease_id_body(int64_t id);  // keepalive, revoke
// start_revision 0: from the next write on.
std::string watch_body(std::string_view key, std::string_view range_end, int64_t start_revision);

// --- Answers (the body of a 200 reply; a stream's lines) ---
// The "etcdserver" field of GET /version ("3.4.23").
std::string parse_version(std::string_view body);
// The gateway's path prefix for that server version: "/v3" (3.4 and later) or "/v3beta" (3.3).
// GatewayFormatError for older servers (no JSON gateway under these paths) or no version.
std::string api_prefix(std::string_view server_version);

int64_t parse_put(std::string_view body);  // the revision of the write
RangeResponse parse_range(std::string_view body);
int64_t parse_delete_range(std::string_view body);  // keys deleted
TxnResponse parse_txn(std::string_view body);
LeaseGrant parse_lease_grant(std::string_view body);
void parse_lease_revoke(std::string_view body);
// One line of /lease/keepalive: the lease's remaining TTL, 0 when etcd no longer has it.
int64_t parse_keepalive_line(std::string_view line);
WatchMessage parse_watch_line(std::string_view line);

// The gRPC status of an error answer, unary or streamed form; nullopt when `body` is not one
// (so the caller can say that the server is not etcd's gateway).
std::optional<GrpcStatus> parse_error(std::string_view body);

// The range_end that makes [prefix, range_end) every key starting with `prefix`: the prefix with
// its last byte below 0xff incremented and what follows dropped; "\0" (to the end of the key
// space) for an empty prefix or one of 0xff bytes only.
std::string prefix_end(std::string_view prefix);

// Names a range in messages: "'k'", "prefix 'p'", "'a' to 'b'", "'a' onwards".
std::string describe_range(std::string_view key, std::string_view range_end);

// "lease 38f8a4b1c0de0f12": a lease ID as etcdctl prints it (hex).
std::string lease_name(int64_t id);

// Bytes (a key, the start of a bad answer) as they appear in messages: printable ASCII as is,
// other bytes as \xNN, cut after `max` bytes ("...").
std::string printable(std::string_view bytes, size_t max = 80);

}  // namespace launch::etcd
