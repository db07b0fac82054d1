// The store's wire protocol: constants, opcodes, status codes and size limits.
// proto/PROTOCOL.md is the byte-level specification; keep the two in step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace proto {

// --- Frame header (16 bytes, every integer little-endian) ---
// offset 0: magic u32 | 4: version u8 | 5: op u8 | 6: status u8 | 7: reserved u8 (0)
// 8: payload length u64
inline constexpr uint32_t kMagic = 0x5254534Cu;  // the bytes "LSTR" on the wire
inline constexpr uint8_t kVersion = 2;  // 2: QUOTA_EXCEEDED (the store's quota)
inline constexpr size_t kHeaderSize = 16;

enum class Op : uint8_t {
  Hello = 1,       // handshake: job id, token, client name; must be the first frame
  Set = 2,         // key, value
  Get = 3,         // key, timeout_ms: blocks until the key exists
  Add = 4,         // key, delta: atomic integer add, returns the new value
  Check = 5,       // keys: which exist (never blocks)
  Wait = 6,        // keys, timeout_ms: blocks until every key exists
  Delete = 7,      // key: returns whether it existed
  CompareSet = 8,  // key, expected, desired: returns the value now stored
  Ping = 9,        // liveness; also tells a client the connection still works
  MultiGet = 10,   // keys, timeout_ms: blocks until every key exists, returns all values
};

enum class Status : uint8_t {
  Ok = 0,
  Timeout = 1,           // a blocking call's timeout passed (message: what was missing)
  JobFailed = 2,         // the launcher recorded a worker failure (message: the record)
  BadVersion = 3,        // header version is not kVersion
  BadJob = 4,            // HELLO's job id is not this store's job
  BadToken = 5,          // HELLO's token is wrong
  NotAuthenticated = 6,  // a request before a successful HELLO
  Malformed = 7,         // bad magic, reserved bits set, payload not as the op requires
  TooLarge = 8,          // a length exceeds the limits below
  NotInteger = 9,        // ADD on a value that is not a decimal int64, or overflow
  ReservedKey = 10,      // a write to the reserved prefix "__launch/"
  UnknownOp = 11,        // op byte not in Op
  QuotaExceeded = 12,    // a write would take the store past its quota (Limits::max_store_*)
};

inline constexpr uint8_t kMaxOp = 10;
inline constexpr uint8_t kMaxStatus = 12;

std::string_view op_name(Op op);
std::string_view status_name(Status s);

// --- Reserved keys ---
// Clients may read these but not write them; only the launcher does.
inline constexpr std::string_view kReservedPrefix = "__launch/";
inline constexpr std::string_view kJobFailedKey = "__launch/job_failed";

// --- Limits ---
// What one key counts against Limits::max_store_bytes besides its key and value: the hash table's
// node (80 bytes with libstdc++: a pointer, two string headers, the cached hash), its bucket and
// malloc's rounding of the node and of the value.
inline constexpr size_t kEntryCharge = 128;

// Checked on every length before anything is allocated. The defaults bound a single request;
// a deployment may lower them (never raise them above the defaults: peers assume them).
struct Limits {
  size_t max_key = 4096;              // a key names something; 4 KiB is ample
  size_t max_value = 64u << 20;       // values carry ids and small blobs, not datasets
  size_t max_keys = 65536;            // keys in one CHECK/WAIT/MULTI_GET
  size_t max_message = 16384;         // error text in a non-OK reply
  // The store's quota, for all its clients together (one job): without it one authenticated
  // client writing 500,000 keys took `launch` to 559 MB. Bytes count each entry's key and value
  // plus kEntryCharge, its bookkeeping, so that they bound the store's memory whatever the sizes
  // (a full store of 1 KiB values: `launch` at about 110 MB). Room for a value of the largest size;
  // far above what a job's ids, endpoints, counters and barriers use (a few short keys per rank).
  size_t max_store_keys = 262144;
  size_t max_store_bytes = 96u << 20;

  // The largest payload a frame may announce: COMPARE_SET (key + two values) is the
  // largest request, MULTI_GET's reply is bounded by the same figure (TOO_LARGE otherwise).
  size_t max_payload() const { return 4 + max_key + 2 * (4 + max_value); }
};

}  // namespace proto
