#include "launcher/etcd/gateway.h"

#include <charconv>
#include <cstdint>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "launcher/etcd/base64.h"

namespace launch::etcd {

using nlohmann::json;

namespace {

// --- Reading ---
json parse_json(std::string_view text) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw GatewayFormatError("not JSON: '" + printable(text, 60) + "'");
  if (!j.is_object()) throw GatewayFormatError("not a JSON object: '" + printable(text, 60) + "'");
  return j;
}

const json& empty_object() {
  static const json e = json::object();
  return e;
}

// A message field; absent (the gateway leaves out zero values) reads as an empty message.
const json& object_field(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return empty_object();
  if (!it->is_object()) throw GatewayFormatError(std::string("field '") + name + "' is not an object");
  return *it;
}

// int64 fields come as strings; a plain JSON integer is taken too.
int64_t int64_field(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return 0;
  if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX))
    throw GatewayFormatError(std::string("field '") + name + "' is not an int64");
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return v;
  }
  throw GatewayFormatError(std::string("field '") + name + "' is not an int64");
}

bool bool_field(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return false;
  if (!it->is_boolean()) throw GatewayFormatError(std::string("field '") + name + "' is not a boolean");
  return it->get<bool>();
}

std::string string_field(const json& o, const char* name) {
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return "";
  if (!it->is_string()) throw GatewayFormatError(std::string("field '") + name + "' is not a string");
  return it->get<std::string>();
}

std::string bytes_field(const json& o, const char* name) {
  auto decoded = base64_decode(string_field(o, name));
  if (!decoded) throw GatewayFormatError(std::string("field '") + name + "' is not base64");
  return *decoded;
}

const json& array_field(const json& o, const char* name) {
  static const json empty = json::array();
  auto it = o.find(name);
  if (it == o.end() || it->is_null()) return empty;
  if (!it->is_array()) throw GatewayFormatError(std::string("field '") + name + "' is not an array");
  return *it;
}

int64_t header_revision(const json& o) { return int64_field(object_field(o, "header"), "revision"); }

KeyValue key_value(const json& o) {
  if (!o.is_object()) throw GatewayFormatError("a key-value is not an object");
  KeyValue kv;
  kv.key = bytes_field(o, "key");
  kv.value = bytes_field(o, "value");
  kv.create_revision = int64_field(o, "create_revision");
  kv.mod_revision = int64_field(o, "mod_revision");
  kv.version = int64_field(o, "version");
  kv.lease = int64_field(o, "lease");
  return kv;
}

RangeResponse range_response(const json& o) {
  RangeResponse r;
  r.revision = header_revision(o);
  for (const json& kv : array_field(o, "kvs")) r.kvs.push_back(key_value(kv));
  r.count = int64_field(o, "count");
  r.more = bool_field(o, "more");
  return r;
}

// The object inside a stream line's {"result": ...}.
json stream_result(std::string_view line) {
  json j = parse_json(line);
  auto it = j.find("result");
  if (it == j.end() || !it->is_object()) throw GatewayFormatError("a stream line without 'result': '" + printable(line, 60) + "'");
  return std::move(*it);
}

// --- Writing ---
std::string i64(int64_t v) { return std::to_string(v); }  // int64 as protobuf's JSON writes it

json request_op(const RequestOp& op) {
  json o = {{"key", base64_encode(op.key)}};
  switch (op.type) {
    case RequestOp::Type::Put:
      o["value"] = base64_encode(op.value);
      if (op.lease != 0) o["lease"] = i64(op.lease);
      return {{"request_put", o}};
    case RequestOp::Type::Range:
      if (!op.range_end.empty()) o["range_end"] = base64_encode(op.range_end);
      return {{"request_range", o}};
    case RequestOp::Type::DeleteRange:
      if (!op.range_end.empty()) o["range_end"] = base64_encode(op.range_end);
      return {{"request_delete_range", o}};
  }
  return o;
}

const char* target_name(CompareTarget t) {
  switch (t) {
    case CompareTarget::Version: return "VERSION";
    case CompareTarget::Create: return "CREATE";
    case CompareTarget::Mod: return "MOD";
    case CompareTarget::Value: return "VALUE";
    case CompareTarget::Lease: return "LEASE";
  }
  return "VERSION";
}

const char* result_name(CompareResult r) {
  switch (r) {
    case CompareResult::Equal: return "EQUAL";
    case CompareResult::Greater: return "GREATER";
    case CompareResult::Less: return "LESS";
    case CompareResult::NotEqual: return "NOT_EQUAL";
  }
  return "EQUAL";
}

json compare(const Compare& c) {
  json o = {{"key", base64_encode(c.key)}, {"target", target_name(c.target)}, {"result", result_name(c.result)}};
  // The oneof target_union: the field named after the target.
  switch (c.target) {
    case CompareTarget::Version: o["version"] = i64(c.number); break;
    case CompareTarget::Create: o["create_revision"] = i64(c.number); break;
    case CompareTarget::Mod: o["mod_revision"] = i64(c.number); break;
    case CompareTarget::Value: o["value"] = base64_encode(c.value); break;
    case CompareTarget::Lease: o["lease"] = i64(c.number); break;
  }
  return o;
}

}  // namespace

bool KeyValue::operator==(const KeyValue& o) const {
  return key == o.key && value == o.value && create_revision == o.create_revision &&
         mod_revision == o.mod_revision && version == o.version && lease == o.lease;
}

RequestOp RequestOp::put(std::string key, std::string value, int64_t lease) {
  RequestOp op;
  op.type = Type::Put;
  op.key = std::move(key);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}

RequestOp RequestOp::range(std::string key, std::string range_end) {
  RequestOp op;
  op.type = Type::Range;
  op.key = std::move(key);
  op.range_end = std::move(range_end);
  return op;
}

RequestOp RequestOp::delete_range(std::string key, std::string range_end) {
  RequestOp op = range(std::move(key), std::move(range_end));
  op.type = Type::DeleteRange;
  return op;
}

// --- Request bodies ---
std::string put_body(std::string_view key, std::string_view value, int64_t lease) {
  return request_op(RequestOp::put(std::string(key), std::string(value), lease))["request_put"].dump();
}

std::string range_body(std::string_view key, std::string_view range_end, int64_t revision) {
  json o = request_op(RequestOp::range(std::string(key), std::string(range_end)))["request_range"];
  if (revision != 0) o["revision"] = i64(revision);
  return o.dump();
}

std::string delete_range_body(std::string_view key, std::string_view range_end) {
  return request_op(RequestOp::delete_range(std::string(key), std::string(range_end)))["request_delete_range"].dump();
}

std::string txn_body(const Txn& txn) {
  json o = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const Compare& c : txn.compare) o["compare"].push_back(compare(c));
  for (const RequestOp& op : txn.success) o["success"].push_back(request_op(op));
  for (const RequestOp& op : txn.failure) o["failure"].push_back(request_op(op));
  return o.dump();
}

std::string lease_grant_body(int64_t ttl_s) { return json{{"TTL", i64(ttl_s)}}.dump(); }

std::string lease_id_body(int64_t id) { return json{{"ID", i64(id)}}.dump(); }

std::string watch_body(std::string_view key, std::string_view range_end, int64_t start_revision) {
  json c = {{"key", base64_encode(key)}};
  if (!range_end.empty()) c["range_end"] = base64_encode(range_end);
  if (start_revision != 0) c["start_revision"] = i64(start_revision);
  return json{{"create_request", c}}.dump();
}

// --- Answers ---
std::string parse_version(std::string_view body) {
  std::string v = string_field(parse_json(body), "etcdserver");
  if (v.empty()) throw GatewayFormatError("no 'etcdserver' version in '" + printable(body, 60) + "'");
  return v;
}

std::string api_prefix(std::string_view server_version) {
  int major = 0, minor = 0;
  if (std::sscanf(std::string(server_version).c_str(), "%d.%d", &major, &minor) != 2)
    throw GatewayFormatError("server version '" + printable(server_version) + "' is not MAJOR.MINOR");
  if (major > 3 || (major == 3 && minor >= 4)) return "/v3";
  if (major == 3 && minor == 3) return "/v3beta";
  throw GatewayFormatError("etcd " + std::string(server_version) +
                           " is too old: its JSON gateway is not under /v3 or /v3beta (need etcd 3.3 or later)");
}

int64_t parse_put(std::string_view body) { return header_revision(parse_json(body)); }

RangeResponse parse_range(std::string_view body) { return range_response(parse_json(body)); }

int64_t parse_delete_range(std::string_view body) { return int64_field(parse_json(body), "deleted"); }

TxnResponse parse_txn(std::string_view body) {
  json o = parse_json(body);
  TxnResponse t;
  t.succeeded = bool_field(o, "succeeded");
  t.revision = header_revision(o);
  for (const json& r : array_field(o, "responses")) {
    if (!r.is_object()) throw GatewayFormatError("a txn response is not an object");
    ResponseOp op;
    if (r.contains("response_range")) {
      op.type = RequestOp::Type::Range;
      op.range = range_response(object_field(r, "response_range"));
    } else if (r.contains("response_delete_range")) {
      op.type = RequestOp::Type::DeleteRange;
      op.deleted = int64_field(object_field(r, "response_delete_range"), "deleted");
    } else if (r.contains("response_put")) {
      op.type = RequestOp::Type::Put;
    } else {
      throw GatewayFormatError("a txn response of no known kind: '" + printable(r.dump(), 60) + "'");
    }
    t.responses.push_back(std::move(op));
  }
  return t;
}

LeaseGrant parse_lease_grant(std::string_view body) {
  json o = parse_json(body);
  LeaseGrant g{int64_field(o, "ID"), int64_field(o, "TTL")};
  std::string error = string_field(o, "error");  // LeaseGrantResponse.error: a refusal in the result
  if (!error.empty()) throw GatewayFormatError("lease grant refused: " + error);
  if (g.id == 0 || g.ttl <= 0) throw GatewayFormatError("lease grant without an ID and a TTL: '" + printable(body, 60) + "'");
  return g;
}

void parse_lease_revoke(std::string_view body) { parse_json(body); }

int64_t parse_keepalive_line(std::string_view line) {
  int64_t ttl = int64_field(stream_result(line), "TTL");
  return ttl < 0 ? 0 : ttl;
}

WatchMessage parse_watch_line(std::string_view line) {
  json r = stream_result(line);
  WatchMessage m;
  m.revision = header_revision(r);
  m.created = bool_field(r, "created");
  m.canceled = bool_field(r, "canceled");
  m.compact_revision = int64_field(r, "compact_revision");
  m.cancel_reason = string_field(r, "cancel_reason");
  for (const json& e : array_field(r, "events")) {
    if (!e.is_object()) throw GatewayFormatError("a watch event is not an object");
    Event ev;
    std::string type = string_field(e, "type");
    if (type.empty() || type == "PUT") {
      ev.type = EventType::Put;
    } else if (type == "DELETE") {
      ev.type = EventType::Delete;
    } else {
      throw GatewayFormatError("a watch event of type '" + printable(type) + "'");
    }
    ev.kv = key_value(object_field(e, "kv"));
    m.events.push_back(std::move(ev));
  }
  return m;
}

std::optional<GrpcStatus> parse_error(std::string_view body) {
  json j = json::parse(body.begin(), body.end(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  auto it = j.find("error");
  if (it == j.end()) return std::nullopt;
  try {
    if (it->is_object()) {  // a stream's error line
      return GrpcStatus{static_cast<int>(int64_field(*it, "grpc_code")), string_field(*it, "message")};
    }
    if (it->is_string()) {  // a unary call's error body
      std::string message = string_field(j, "message");
      return GrpcStatus{static_cast<int>(int64_field(j, "code")), message.empty() ? it->get<std::string>() : message};
    }
  } catch (const GatewayFormatError&) {
  }
  return std::nullopt;
}

std::string prefix_end(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<unsigned char>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');
}

std::string describe_range(std::string_view key, std::string_view range_end) {
  const std::string k = "'" + printable(key) + "'";
  if (range_end.empty()) return k;
  if (range_end == prefix_end(key)) return "prefix " + k;
  if (range_end == std::string_view("\0", 1)) return k + " onwards";
  return k + " to '" + printable(range_end) + "'";
}

std::string lease_name(int64_t id) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "lease %llx", static_cast<unsigned long long>(id));
  return buf;
}

std::string printable(std::string_view bytes, size_t max) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < max; ++i) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (bytes.size() > max) out += "...";
  return out;
}

}  // namespace launch::etcd
