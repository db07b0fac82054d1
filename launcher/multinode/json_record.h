// Reading a record of ours back from the store (JSON: a node's registration, the membership
// record): every way it can be wrong is one `Error` naming the record and the field, never a
// JSON library's exception. Header-only: a helper of layout.cpp and elastic/membership.cpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace launch::multinode {

// `text` as a JSON object; `what` names the record ("the node record in the store").
template <class Error>
nlohmann::json parse_record(const std::string& text, const std::string& what) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + " is not JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(what + " is not a JSON object");
  return j;
}

template <class Error, class T>
void record_field(const nlohmann::json& j, const char* name, T& out, const std::string& what) {
  try {
    j.at(name).get_to(out);
  } catch (const nlohmann::json::exception&) {
    throw Error(what + ": field '" + name +
                "' missing or of the wrong type (is every node running the same launch version?)");
  }
}

}  // namespace launch::multinode
