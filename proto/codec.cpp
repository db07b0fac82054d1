#include "proto/codec.h"

#include <cstring>
#include <limits>

namespace proto {

// --- Names ---
std::string_view op_name(Op op) {
  switch (op) {
    case Op::Hello: return "HELLO";
    case Op::Set: return "SET";
    case Op::Get: return "GET";
    case Op::Add: return "ADD";
    case Op::Check: return "CHECK";
    case Op::Wait: return "WAIT";
    case Op::Delete: return "DELETE";
    case Op::CompareSet: return "COMPARE_SET";
    case Op::Ping: return "PING";
    case Op::MultiGet: return "MULTI_GET";
  }
  return "UNKNOWN";
}

std::string_view status_name(Status s) {
  switch (s) {
    case Status::Ok: return "OK";
    case Status::Timeout: return "TIMEOUT";
    case Status::JobFailed: return "JOB_FAILED";
    case Status::BadVersion: return "BAD_VERSION";
    case Status::BadJob: return "BAD_JOB";
    case Status::BadToken: return "BAD_TOKEN";
    case Status::NotAuthenticated: return "NOT_AUTHENTICATED";
    case Status::Malformed: return "MALFORMED";
    case Status::TooLarge: return "TOO_LARGE";
    case Status::NotInteger: return "NOT_INTEGER";
    case Status::ReservedKey: return "RESERVED_KEY";
    case Status::UnknownOp: return "UNKNOWN_OP";
    case Status::QuotaExceeded: return "QUOTA_EXCEEDED";
  }
  return "UNKNOWN";
}

namespace {

// --- Little-endian writer ---
struct Writer {
  std::string& out;
  void u8(uint8_t v) { out.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    char b[4];
    for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out.append(b, 4);
  }
  void u64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
    out.append(b, 8);
  }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    out.append(s.data(), s.size());
  }
};

uint32_t load_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
uint64_t load_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

// --- Bounds-checked reader: the first failure sticks and names the field ---
struct Reader {
  explicit Reader(std::string_view bytes) : in(bytes) {}
  std::string_view in;
  size_t pos = 0;
  Status error = Status::Ok;
  std::string message;

  bool ok() const { return error == Status::Ok; }
  size_t left() const { return in.size() - pos; }
  void fail(Status s, std::string m) {
    if (ok()) {
      error = s;
      message = std::move(m);
    }
  }
  uint8_t u8(const char* what) {
    if (!ok()) return 0;
    if (left() < 1) return fail(Status::Malformed, std::string("payload ends inside ") + what), 0;
    return static_cast<uint8_t>(in[pos++]);
  }
  uint32_t u32(const char* what) {
    if (!ok()) return 0;
    if (left() < 4) return fail(Status::Malformed, std::string("payload ends inside ") + what), 0;
    uint32_t v = load_u32(in.data() + pos);
    pos += 4;
    return v;
  }
  uint64_t u64(const char* what) {
    if (!ok()) return 0;
    if (left() < 8) return fail(Status::Malformed, std::string("payload ends inside ") + what), 0;
    uint64_t v = load_u64(in.data() + pos);
    pos += 8;
    return v;
  }
  // Length checked against the limit and the bytes present before the string is built.
  std::string str(const char* what, size_t limit) {
    uint32_t n = u32(what);
    if (!ok()) return {};
    if (n > limit) {
      fail(Status::TooLarge, std::string(what) + " of " + std::to_string(n) +
                                 " bytes exceeds the limit of " + std::to_string(limit));
      return {};
    }
    if (n > left()) {
      fail(Status::Malformed, std::string(what) + " announces " + std::to_string(n) +
                                  " bytes but only " + std::to_string(left()) + " remain");
      return {};
    }
    std::string s(in.data() + pos, n);
    pos += n;
    return s;
  }
  // A count of items each at least `min_item` bytes long: checked before reserving.
  uint32_t count(const char* what, size_t limit, size_t min_item) {
    uint32_t n = u32(what);
    if (!ok()) return 0;
    if (n > limit) {
      fail(Status::TooLarge, std::string(what) + " " + std::to_string(n) +
                                 " exceeds the limit of " + std::to_string(limit));
      return 0;
    }
    if (static_cast<uint64_t>(n) * min_item > left()) {
      fail(Status::Malformed, std::string(what) + " " + std::to_string(n) +
                                  " does not fit in the " + std::to_string(left()) +
                                  " bytes that remain");
      return 0;
    }
    return n;
  }
  void end() {
    if (ok() && left() != 0)
      fail(Status::Malformed, std::to_string(left()) + " unexpected bytes after the payload");
  }
};

void write_header(std::string& out, Op op, Status st, uint64_t len) {
  Writer w{out};
  w.u32(kMagic);
  w.u8(kVersion);
  w.u8(static_cast<uint8_t>(op));
  w.u8(static_cast<uint8_t>(st));
  w.u8(0);
  w.u64(len);
}

// Appends a frame whose payload is written by `body`, patching the length afterwards.
template <class F>
void append_frame(std::string& out, Op op, Status st, F&& body) {
  size_t start = out.size();
  write_header(out, op, st, 0);
  Writer w{out};
  body(w);
  uint64_t len = out.size() - start - kHeaderSize;
  for (int i = 0; i < 8; ++i) out[start + 8 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
}

template <class T>
Decoded<T> from_reader(Reader& r, T&& v) {
  Decoded<T> d;
  r.end();
  if (!r.ok()) {
    d.state = Parse::Error;
    d.error = r.error;
    d.message = std::move(r.message);
    return d;
  }
  d.state = Parse::Ok;
  d.value = std::move(v);
  return d;
}

template <class T, class PayloadFn>
Decoded<T> decode_frame(std::string_view buf, const Limits& limits, bool request,
                        PayloadFn&& payload_fn) {
  Decoded<T> out;
  Decoded<Header> h = parse_header(buf, limits, request);
  if (h.state != Parse::Ok) {
    out.state = h.state;
    out.error = h.error;
    out.message = std::move(h.message);
    return out;
  }
  // payload_len <= max_payload(), so the sum cannot overflow.
  if (buf.size() - kHeaderSize < h.value.payload_len) return out;  // NeedMore
  out = payload_fn(h.value, buf.substr(kHeaderSize, h.value.payload_len), limits);
  if (out.state == Parse::Ok) out.consumed = kHeaderSize + h.value.payload_len;
  return out;
}

}  // namespace

// --- Header ---
Decoded<Header> parse_header(std::string_view b, const Limits& limits, bool request) {
  Decoded<Header> d;
  auto fail = [&](Status s, std::string m) {
    d.state = Parse::Error;
    d.error = s;
    d.message = std::move(m);
    return d;
  };
  // Check what is already present so garbage is refused without waiting for 16 bytes.
  char magic[4];
  for (int i = 0; i < 4; ++i) magic[i] = static_cast<char>((kMagic >> (8 * i)) & 0xff);
  for (size_t i = 0; i < 4 && i < b.size(); ++i)
    if (b[i] != magic[i]) return fail(Status::Malformed, "bad magic: not a store frame");
  if (b.size() < kHeaderSize) return d;  // NeedMore

  Header h;
  h.version = static_cast<uint8_t>(b[4]);
  uint8_t op = static_cast<uint8_t>(b[5]);
  uint8_t st = static_cast<uint8_t>(b[6]);
  uint8_t reserved = static_cast<uint8_t>(b[7]);
  h.payload_len = load_u64(b.data() + 8);
  if (h.version != kVersion)
    return fail(Status::BadVersion, "protocol version " + std::to_string(h.version) +
                                        " is not supported; this store speaks version " +
                                        std::to_string(kVersion));
  if (reserved != 0) return fail(Status::Malformed, "reserved header byte is not 0");
  if (op < 1 || op > kMaxOp) return fail(Status::UnknownOp, "unknown op " + std::to_string(op));
  if (request ? st != 0 : st > kMaxStatus)
    return fail(Status::Malformed, "bad status byte " + std::to_string(st));
  if (h.payload_len > limits.max_payload())
    return fail(Status::TooLarge, "frame announces " + std::to_string(h.payload_len) +
                                      " payload bytes; the limit is " +
                                      std::to_string(limits.max_payload()));
  h.op = static_cast<Op>(op);
  h.status = static_cast<Status>(st);
  d.state = Parse::Ok;
  d.value = h;
  d.consumed = kHeaderSize;
  return d;
}

// --- Requests ---
Decoded<Request> decode_request_payload(const Header& h, std::string_view payload,
                                        const Limits& limits) {
  Reader r(payload);
  Request q;
  q.op = h.op;
  auto read_keys = [&] {
    uint32_t n = r.count("key count", limits.max_keys, 4);
    q.keys.reserve(n);
    for (uint32_t i = 0; i < n && r.ok(); ++i) q.keys.push_back(r.str("key", limits.max_key));
  };
  switch (h.op) {
    case Op::Hello:
      q.job_id = r.str("job id", limits.max_key);
      q.token = r.str("token", limits.max_key);
      q.client_name = r.str("client name", limits.max_key);
      break;
    case Op::Set:
      q.key = r.str("key", limits.max_key);
      q.value = r.str("value", limits.max_value);
      break;
    case Op::Get:
      q.key = r.str("key", limits.max_key);
      q.timeout_ms = r.u64("timeout");
      break;
    case Op::Add:
      q.key = r.str("key", limits.max_key);
      q.delta = static_cast<int64_t>(r.u64("delta"));
      break;
    case Op::Check: read_keys(); break;
    case Op::Wait:
    case Op::MultiGet:
      q.timeout_ms = r.u64("timeout");
      read_keys();
      break;
    case Op::Delete: q.key = r.str("key", limits.max_key); break;
    case Op::CompareSet:
      q.key = r.str("key", limits.max_key);
      q.value = r.str("expected value", limits.max_value);
      q.desired = r.str("desired value", limits.max_value);
      break;
    case Op::Ping: break;
  }
  return from_reader(r, std::move(q));
}

std::string encode_request(const Request& q) {
  std::string out;
  append_frame(out, q.op, Status::Ok, [&](Writer& w) {
    auto keys = [&] {
      w.u32(static_cast<uint32_t>(q.keys.size()));
      for (const auto& k : q.keys) w.str(k);
    };
    switch (q.op) {
      case Op::Hello:
        w.str(q.job_id);
        w.str(q.token);
        w.str(q.client_name);
        break;
      case Op::Set:
        w.str(q.key);
        w.str(q.value);
        break;
      case Op::Get:
        w.str(q.key);
        w.u64(q.timeout_ms);
        break;
      case Op::Add:
        w.str(q.key);
        w.u64(static_cast<uint64_t>(q.delta));
        break;
      case Op::Check: keys(); break;
      case Op::Wait:
      case Op::MultiGet:
        w.u64(q.timeout_ms);
        keys();
        break;
      case Op::Delete: w.str(q.key); break;
      case Op::CompareSet:
        w.str(q.key);
        w.str(q.value);
        w.str(q.desired);
        break;
      case Op::Ping: break;
    }
  });
  return out;
}

// --- Replies ---
Decoded<Reply> decode_reply_payload(const Header& h, std::string_view payload,
                                    const Limits& limits) {
  Reader r(payload);
  Reply p;
  p.status = h.status;
  if (h.status != Status::Ok) {
    p.message = r.str("message", limits.max_message);
    return from_reader(r, std::move(p));
  }
  switch (h.op) {
    case Op::Get:
    case Op::CompareSet: p.value = r.str("value", limits.max_value); break;
    case Op::Add: p.number = static_cast<int64_t>(r.u64("number")); break;
    case Op::Check: {
      uint32_t n = r.count("key count", limits.max_keys, 1);
      p.present.reserve(n);
      for (uint32_t i = 0; i < n && r.ok(); ++i) {
        uint8_t v = r.u8("presence flag");
        if (v > 1) r.fail(Status::Malformed, "presence flag is not 0 or 1");
        p.present.push_back(v);
      }
      break;
    }
    case Op::Delete: {
      uint8_t v = r.u8("existed flag");
      if (v > 1) r.fail(Status::Malformed, "existed flag is not 0 or 1");
      p.existed = v == 1;
      break;
    }
    case Op::MultiGet: {
      uint32_t n = r.count("value count", limits.max_keys, 4);
      p.values.reserve(n);
      for (uint32_t i = 0; i < n && r.ok(); ++i) p.values.push_back(r.str("value", limits.max_value));
      break;
    }
    case Op::Hello:
    case Op::Set:
    case Op::Wait:
    case Op::Ping: break;
  }
  return from_reader(r, std::move(p));
}

void append_reply(std::string& out, Op op, const Reply& p) {
  append_frame(out, op, p.status, [&](Writer& w) {
    if (p.status != Status::Ok) {
      w.str(p.message.size() > Limits{}.max_message
                ? std::string_view(p.message).substr(0, Limits{}.max_message)
                : std::string_view(p.message));
      return;
    }
    switch (op) {
      case Op::Get:
      case Op::CompareSet: w.str(p.value); break;
      case Op::Add: w.u64(static_cast<uint64_t>(p.number)); break;
      case Op::Check:
        w.u32(static_cast<uint32_t>(p.present.size()));
        for (uint8_t v : p.present) w.u8(v ? 1 : 0);
        break;
      case Op::Delete: w.u8(p.existed ? 1 : 0); break;
      case Op::MultiGet:
        w.u32(static_cast<uint32_t>(p.values.size()));
        for (const auto& v : p.values) w.str(v);
        break;
      case Op::Hello:
      case Op::Set:
      case Op::Wait:
      case Op::Ping: break;
    }
  });
}

std::string encode_reply(Op op, const Reply& p) {
  std::string out;
  append_reply(out, op, p);
  return out;
}

// --- Before authentication ---
size_t max_hello_payload(const Limits& limits) { return 3 * (4 + limits.max_key); }

Decoded<Request> decode_hello(std::string_view buf, const Limits& limits) {
  Decoded<Request> out;
  Decoded<Header> h = parse_header(buf, limits, true);
  // parse_header checks the length last: a TooLarge header is valid but for its length.
  if (h.state == Parse::Error && h.error == Status::TooLarge) {
    h.value.op = static_cast<Op>(static_cast<uint8_t>(buf[5]));
    h.value.payload_len = load_u64(buf.data() + 8);
  } else if (h.state != Parse::Ok) {
    out.state = h.state;
    out.error = h.error;
    out.message = std::move(h.message);
    return out;
  }
  auto refuse = [&](Status s, std::string m) {
    out.state = Parse::Error;
    out.error = s;
    out.message = std::move(m);
    out.value.op = h.value.op;
    return out;
  };
  if (h.value.op != Op::Hello)
    return refuse(Status::NotAuthenticated,
                  "the first frame must be HELLO, not " + std::string(op_name(h.value.op)));
  if (h.value.payload_len > max_hello_payload(limits))
    return refuse(Status::TooLarge, "HELLO announces " + std::to_string(h.value.payload_len) +
                                        " payload bytes; a HELLO has at most " +
                                        std::to_string(max_hello_payload(limits)));
  if (buf.size() - kHeaderSize < h.value.payload_len) return out;  // NeedMore
  out = decode_request_payload(h.value, buf.substr(kHeaderSize, h.value.payload_len), limits);
  if (out.state == Parse::Ok) out.consumed = kHeaderSize + h.value.payload_len;
  return out;
}

size_t hello_bytes_wanted(std::string_view buf, const Limits& limits) {
  if (buf.size() < kHeaderSize) {
    // A wrong magic byte is refused as soon as it arrives: nothing more is wanted then.
    return parse_header(buf, limits, true).state == Parse::Error ? 0 : kHeaderSize - buf.size();
  }
  Decoded<Request> d = decode_hello(buf.substr(0, kHeaderSize), limits);
  if (d.state == Parse::Error) return 0;
  const size_t frame = kHeaderSize + static_cast<size_t>(load_u64(buf.data() + 8));  // <= 12,316 here
  return buf.size() >= frame ? 0 : frame - buf.size();
}

// --- Whole frames ---
Decoded<Request> decode_request(std::string_view buf, const Limits& limits) {
  return decode_frame<Request>(buf, limits, true, decode_request_payload);
}
Decoded<Reply> decode_reply(std::string_view buf, const Limits& limits) {
  return decode_frame<Reply>(buf, limits, false, decode_reply_payload);
}

}  // namespace proto
