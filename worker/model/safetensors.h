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
void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
std::vector<StTensor> read_safetensors(const std::string& path,
                                       std::map<std::string, std::string>* metadata = nullptr);

// "[64, 3, 7, 7]": a shape as the error messages write it.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace worker
