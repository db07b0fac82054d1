// Frame encoding and decoding (proto/PROTOCOL.md). No sockets here: bytes in, values out.
// Every length is checked against Limits and against the bytes present before anything is
// allocated, so a hostile peer cannot make the decoder allocate more than it sent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "proto/protocol.h"

namespace proto {

struct Header {
  uint8_t version = kVersion;
  Op op = Op::Ping;
  Status status = Status::Ok;
  uint64_t payload_len = 0;
};

// One request; which fields matter depends on op (see PROTOCOL.md, "Requests").
struct Request {
  Op op = Op::Ping;
  std::string key;                // SET GET ADD DELETE COMPARE_SET
  std::string value;              // SET: the value; COMPARE_SET: expected
  std::string desired;            // COMPARE_SET
  int64_t delta = 0;              // ADD
  uint64_t timeout_ms = 0;        // GET WAIT MULTI_GET
  std::vector<std::string> keys;  // CHECK WAIT MULTI_GET
  std::string job_id;             // HELLO
  std::string token;              // HELLO
  std::string client_name;        // HELLO
};

// One reply; status Ok carries the op's result, any other status carries only `message`.
struct Reply {
  Status status = Status::Ok;
  std::string message;              // non-OK
  std::string value;                // GET, COMPARE_SET
  int64_t number = 0;               // ADD
  bool existed = false;             // DELETE
  std::vector<uint8_t> present;     // CHECK: 1 per key that exists
  std::vector<std::string> values;  // MULTI_GET

  static Reply error(Status s, std::string msg) {
    Reply r;
    r.status = s;
    r.message = std::move(msg);
    return r;
  }
};

// --- Decoding results ---
enum class Parse { NeedMore, Ok, Error };

template <class T>
struct Decoded {
  Parse state = Parse::NeedMore;
  T value{};
  size_t consumed = 0;         // bytes of the frame (header + payload) when Ok
  Status error = Status::Ok;   // when Error
  std::string message;         // when Error: one line naming what was wrong
};

// --- Header ---
// Validates magic, version, reserved byte, op range and the announced length (against
// limits.max_payload()) from the first kHeaderSize bytes. NeedMore if fewer are present.
// `request` selects the rule for the status byte (0 in requests, a known status in replies).
Decoded<Header> parse_header(std::string_view bytes, const Limits& limits, bool request);

// --- Payloads (exactly header.payload_len bytes) ---
Decoded<Request> decode_request_payload(const Header& h, std::string_view payload,
                                        const Limits& limits);
Decoded<Reply> decode_reply_payload(const Header& h, std::string_view payload,
                                    const Limits& limits);

// --- Whole frames from a buffer that may hold a partial frame or several ---
Decoded<Request> decode_request(std::string_view buf, const Limits& limits);
Decoded<Reply> decode_reply(std::string_view buf, const Limits& limits);

// --- Before authentication ---
// What the server reads from a client it does not know yet is bounded by HELLO's own size, not
// by the payload limit: three strings (job id, token, client name) of at most max_key bytes.
size_t max_hello_payload(const Limits& limits);
// The first frame of a connection. It must be a HELLO of at most max_hello_payload() bytes: any
// other op is NotAuthenticated and a longer HELLO TooLarge, both decided from the 16-byte header
// alone, before a payload byte is read. In those two errors `value.op` is the header's op (the
// op the refusal answers); for any other error the header could not be read and it is Ping.
Decoded<Request> decode_hello(std::string_view buf, const Limits& limits);
// How many more bytes complete the first frame held in `buf` (a prefix of it): 0 when it is
// complete or already refused, kHeaderSize - buf.size() while the header is incomplete. Never
// more than kHeaderSize + max_hello_payload() - buf.size(), so a server that reads only this much
// buffers at most that for a client that has not authenticated.
size_t hello_bytes_wanted(std::string_view buf, const Limits& limits);

// --- Encoding (complete frames) ---
std::string encode_request(const Request& r);
std::string encode_reply(Op op, const Reply& r);
// Encodes straight into `out` (appending), for the server's write buffers.
void append_reply(std::string& out, Op op, const Reply& r);

}  // namespace proto
