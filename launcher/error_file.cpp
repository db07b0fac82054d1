#include "launcher/error_file.h"

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

namespace launch {

namespace {

// A bound on what we read: a traceback is kilobytes, a corrupt file must not cost gigabytes.
constexpr size_t kMaxErrorFile = size_t(1) << 20;

}  // namespace

std::optional<PythonError> parse_error_file(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("message")) return std::nullopt;
  const auto& m = j["message"];
  PythonError e;
  if (m.is_string()) {
    e.message = m.get<std::string>();
  } else if (m.is_object() && m.contains("message") && m["message"].is_string()) {
    e.message = m["message"].get<std::string>();
    if (m.contains("extraInfo") && m["extraInfo"].is_object()) {
      const auto& x = m["extraInfo"];
      if (x.contains("py_callstack") && x["py_callstack"].is_string()) e.traceback = x["py_callstack"].get<std::string>();
    }
  } else {
    return std::nullopt;
  }
  return e;
}

std::optional<PythonError> read_error_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::string text;
  text.resize(kMaxErrorFile);
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  return parse_error_file(text);
}

}  // namespace launch
