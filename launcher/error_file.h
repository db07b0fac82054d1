// The error file a failing PyTorch rank leaves (TORCHELASTIC_ERROR_FILE, written by
// torch.distributed.elastic.multiprocessing.errors.record): JSON, in one of torch's two layouts
//   {"message": {"message": "ValueError: ...", "extraInfo": {"py_callstack": "Traceback ...",
//                "timestamp": "1700000000"}}}
//   {"message": "ValueError: ...", "timestamp": 1700000000}   (the newer, flat one)
// The failure report prints the root cause's message and traceback from it.
#pragma once

#include <optional>
#include <string>

namespace launch {

struct PythonError {
  std::string message;    // "ValueError: bad learning rate"
  std::string traceback;  // "Traceback (most recent call last): ..." (empty in the flat layout)
};

// Pure: nullopt when `json` is not such a record.
std::optional<PythonError> parse_error_file(const std::string& json);
// The file at `path`, when there (at most 1 MiB of it) and parseable.
std::optional<PythonError> read_error_file(const std::string& path);

}  // namespace launch
