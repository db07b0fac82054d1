// safetensors files (8-byte little-endian header length, JSON header, raw little-endian data),
// written and read with nlohmann_json alone. Files are written to a temporary name in the same
// folder and renamed, so a crash never leaves a torn file. The model's state as such tensors:
// state_dict.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace worker {

struct StTensor {
  std::string name;
  std::string dtype;            // "F32", "I64", "BF16", ... (safetensors names)
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;    // little-endian, row-major
};

// Throws std::runtime_error naming the file (and tensor) on any failure.
//
// Integrity: the writer adds one metadata entry per tensor, "xxh3_64.<name>": the XXH3-64 hash
// of its bytes, 16 hex digits (metadata is free-form strings, so torch and torchvision load the
// file as before). The reader checks every tensor of a file that carries them (ours; files of
// other writers carry none and are read unchecked): a mismatch, a checksum without its tensor or
// a tensor without its checksum is an error naming the file and the tensor. The returned
// metadata leaves these entries out.
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
std::vector<StTensor> read_safetensors(const std::string& path,
                                       std::map<std::string, std::string>* metadata = nullptr);
inline constexpr const char* kChecksumPrefix = "xxh3_64.";

// "[64, 3, 7, 7]": a shape as the error messages write it.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace worker
