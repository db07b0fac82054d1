#include "proto/rendezvous.h"

namespace proto {

std::string unique_id_key(const std::string& comm_name, uint64_t generation) {
  return "nccl/uid/" + comm_name + "/" + std::to_string(generation);
}

std::string share_unique_id(Client& client, int rank, const std::string& comm_name,
                            uint64_t generation, std::string_view rank0_blob,
                            size_t expected_size, std::chrono::milliseconds timeout) {
  const std::string key = unique_id_key(comm_name, generation);
  if (rank == 0) {
    if (expected_size != 0 && rank0_blob.size() != expected_size)
      throw StoreError(StoreError::Kind::Invalid,
                       "unique id for '" + comm_name + "' is " + std::to_string(rank0_blob.size()) +
                           " bytes, expected " + std::to_string(expected_size));
    client.set(key, rank0_blob, timeout);
    return std::string(rank0_blob);
  }
  std::string blob = client.get(key, timeout, "rank 0");
  if (expected_size != 0 && blob.size() != expected_size)
    throw StoreError(StoreError::Kind::Protocol,
                     "key '" + key + "' (written by rank 0) holds " + std::to_string(blob.size()) +
                         " bytes, expected a " + std::to_string(expected_size) + "-byte unique id");
  return blob;
}

}  // namespace proto
