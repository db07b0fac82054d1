// Brokering a communicator's unique id (e.g. NCCL's 128-byte ncclUniqueId) through the store.
// Free of NCCL on purpose: the blob is opaque bytes, so the exchange is tested on CPU.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "proto/client.h"

namespace proto {

// "nccl/uid/<name>/<generation>": one key per communicator and (re)initialisation.
std::string unique_id_key(const std::string& comm_name, uint64_t generation);

// Rank 0 stores `rank0_blob` under unique_id_key() and returns it; every other rank GETs it,
// waiting up to `timeout` (the error names the key and rank 0), and checks it is
// `expected_size` bytes long (0: any size). Throws StoreError.
std::string share_unique_id(Client& client, int rank, const std::string& comm_name,
                            uint64_t generation, std::string_view rank0_blob,
                            size_t expected_size, std::chrono::milliseconds timeout);

}  // namespace proto
