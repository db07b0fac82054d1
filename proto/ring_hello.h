// The CPU ring's connection set-up (worker/train/ring_comm.cpp), ring protocol version 2: who
// may join a rank's ring and how it proves it. proto/RING_PROTOCOL.md is the byte-level
// specification; keep the two in step. No sockets here: bytes in, values out, as proto/codec.h.
//
// Each rank connects to its right neighbour (the connector) and accepts its left one (the
// acceptor). Four messages, each a 16-byte header and a body of a length fixed (or bounded) by
// its type, checked before a body byte is read:
//   connector -> acceptor  HELLO      world, rank, the connector's nonce, the job id
//   acceptor  -> connector CHALLENGE  the acceptor's nonce, its MAC of the transcript
//   connector -> acceptor  PROOF      the connector's MAC of the transcript
//   acceptor  -> connector VERDICT    accepted, or why not
// The MACs are HMAC-SHA256 keyed with the job's token (LAUNCH_STORE_TOKEN) over both nonces,
// the job id, the world size, both ranks and the ring's name, each side with its own role
// label: a peer without the token cannot answer a fresh challenge, and a recorded PROOF is
// worthless for the next connection (another acceptor nonce).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace proto::ring {

inline constexpr uint32_t kMagic = 0x31474e52u;  // "RNG1" on the wire (version 1's too, so it can be told apart)
inline constexpr uint32_t kVersion = 2;
inline constexpr size_t kHeaderSize = 16;  // magic u32 | version u32 | type u32 | body length u32
inline constexpr size_t kNonceSize = 32;
inline constexpr size_t kMacSize = 32;     // HMAC-SHA256
inline constexpr size_t kMaxJobId = 1024;  // a job id is a name, never a payload

using Nonce = std::array<uint8_t, kNonceSize>;
using Mac = std::array<uint8_t, kMacSize>;

enum class Type : uint32_t { Hello = 1, Challenge = 2, Proof = 3, Verdict = 4 };

// Why an acceptor refused a connector (VERDICT's code; 0 accepts).
enum class Verdict : uint32_t {
  Accepted = 0,
  WrongJob = 1,    // HELLO names another job id
  WrongWorld = 2,  // another world size
  WrongRank = 3,   // not the acceptor's left neighbour
  BadProof = 4,    // PROOF is not the MAC of this connection's transcript (wrong token, replayed)
};
inline constexpr uint32_t kMaxVerdict = 4;
std::string_view verdict_name(Verdict v);

struct Message {
  Type type = Type::Hello;
  uint32_t world = 0, rank = 0;  // HELLO
  std::string job;               // HELLO
  Nonce nonce{};                 // HELLO (the connector's), CHALLENGE (the acceptor's)
  Mac mac{};                     // CHALLENGE, PROOF
  Verdict verdict = Verdict::Accepted;  // VERDICT
};

enum class Parse { NeedMore, Ok, Error };

struct Decoded {
  Parse state = Parse::NeedMore;
  Message msg;
  size_t consumed = 0;  // header + body, when Ok
  std::string error;    // when Error: one line naming what was wrong
};

// One whole message from the start of `buf` (which may hold part of one, or more). Magic,
// version, type and the body length are checked from the header alone, so a stranger's bytes
// are refused before more than kHeaderSize of them are looked at.
Decoded decode(std::string_view buf);
// How many more bytes complete the message at the start of `buf`: never more than its body's
// bound, so a reader that reads only this much buffers at most 16 + 44 + kMaxJobId bytes.
size_t bytes_wanted(std::string_view buf);

std::string encode_hello(uint32_t world, uint32_t rank, std::string_view job, const Nonce& nonce);
std::string encode_challenge(const Nonce& nonce, const Mac& mac);
std::string encode_proof(const Mac& mac);
std::string encode_verdict(Verdict v);

// What both MACs cover: one connection between `connector` and its right neighbour.
struct Transcript {
  std::string ring;  // the ring's name, e.g. "ring/world/0" (the restart's generation is in it)
  std::string job;
  uint32_t world = 0;
  uint32_t connector = 0;  // the acceptor is (connector + 1) % world
  Nonce connector_nonce{}, acceptor_nonce{};
};
enum class Role : uint8_t { Acceptor, Connector };
Mac transcript_mac(std::string_view token, Role role, const Transcript& t);
bool mac_equal(const Mac& a, const Mac& b);  // in constant time

Nonce random_nonce();  // getrandom(2); throws std::runtime_error when the kernel cannot

}  // namespace proto::ring
