// safetensors: exact format, round trip, atomic write, and every kind of corrupt file.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "worker/core/backend.h"
#include "worker/model/state_dict.h"
#include "tests/worker/model/small_model.h"

using namespace worker;

namespace {

// A fresh directory per test case, removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/test_st_XXXXXX";
    REQUIRE(::mkdtemp(t) != nullptr);
    path = t;
  }
  ~TempDir() {
    const std::string cmd = "rm -rf '" + path + "'";
    if (std::system(cmd.c_str()) != 0) WARN("could not remove " << path);
  }
  std::vector<std::string> list() const {
    std::vector<std::string> r;
    DIR* d = ::opendir(path.c_str());
    while (dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) r.push_back(e->d_name);
    ::closedir(d);
    return r;
  }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void spit(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(s.data(), std::streamsize(s.size()));
}

StTensor f32(const std::string& name, std::vector<int64_t> shape, std::vector<float> v) {
  StTensor t{name, "F32", std::move(shape), {}};
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

// A file made by hand, with a given header, so corrupt variants are easy to write.
std::string make_file(const std::string& header, const std::string& data) {
  std::string s(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(uint8_t(n >> (8 * i)));
  return s + header + data;
}

std::string read_error(const std::string& path) {
  try {
    read_safetensors(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("safetensors: round trip with exact layout and metadata", "[safetensors]") {
  TempDir d;
  const std::string p = d.path + "/a.safetensors";
  StTensor i64{"steps", "I64", {}, std::vector<uint8_t>(8, 0)};
  i64.data[0] = 42;
  write_safetensors(p, {f32("w", {2, 3}, {1, 2, 3, 4, 5, 6}), f32("b", {1}, {-7.5f}), i64},
                    {{"format", "pt"}, {"step", "12"}});
  const std::string raw = slurp(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(raw[size_t(i)])) << (8 * i);
  CHECK(n % 8 == 0);  // data section aligned to 8 bytes
  const auto h = nlohmann::json::parse(raw.substr(8, n));
  CHECK(h["w"]["dtype"] == "F32");
  CHECK(h["w"]["shape"] == nlohmann::json::array({2, 3}));
  CHECK(h["w"]["data_offsets"] == nlohmann::json::array({0, 24}));
  CHECK(h["b"]["data_offsets"] == nlohmann::json::array({24, 28}));
  CHECK(h["steps"]["shape"] == nlohmann::json::array());
  CHECK(h["__metadata__"]["step"] == "12");
  CHECK(raw.size() == 8 + n + 36);
  float first;
  std::memcpy(&first, raw.data() + 8 + n, 4);
  CHECK(first == 1.0f);

  std::map<std::string, std::string> meta;
  const auto ts = read_safetensors(p, &meta);
  REQUIRE(ts.size() == 3);
  CHECK(meta.at("format") == "pt");
  CHECK(ts[0].name == "w");
  CHECK(ts[1].name == "b");
  CHECK(ts[2].dtype == "I64");
  CHECK(ts[2].data[0] == 42);
  float b;
  std::memcpy(&b, ts[1].data.data(), 4);
  CHECK(b == -7.5f);
  // Only the final file is left: the temporary was renamed.
  CHECK(d.list() == std::vector<std::string>{"a.safetensors"});
}

TEST_CASE("safetensors: writing errors leave nothing behind", "[safetensors]") {
  TempDir d;
  const std::string p = d.path + "/x.safetensors";
  CHECK_THROWS_WITH(write_safetensors(p, {f32("w", {2, 2}, {1, 2, 3})}),
                    Catch::Contains("'w'") && Catch::Contains("needs 16"));
  CHECK_THROWS_WITH(write_safetensors(p, {f32("w", {1}, {1}), f32("w", {1}, {2})}),
                    Catch::Contains("duplicate tensor 'w'"));
  CHECK(d.list().empty());
  CHECK_THROWS_WITH(write_safetensors(d.path + "/missing/dir/x.safetensors", {f32("w", {1}, {1})}),
                    Catch::Contains("missing/dir/x.safetensors"));
  // Overwriting an existing file replaces it whole.
  write_safetensors(p, {f32("w", {1}, {1})});
  write_safetensors(p, {f32("v", {2}, {3, 4})});
  const auto ts = read_safetensors(p);
  REQUIRE(ts.size() == 1);
  CHECK(ts[0].name == "v");
  CHECK(d.list().size() == 1);
}

TEST_CASE("safetensors: corrupt files are errors naming the file and tensor", "[safetensors]") {
  TempDir d;
  const std::string p = d.path + "/bad.safetensors";
  const std::string data(16, '\0');
  auto hdr = [](const std::string& body) { return "{" + body + "}"; };
  const std::string ok_entry = R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";

  spit(p, make_file(hdr(ok_entry), data));
  CHECK(read_safetensors(p).size() == 1);

  SECTION("missing file") {
    CHECK_THAT(read_error(d.path + "/nope.safetensors"), Catch::Contains("nope.safetensors") && Catch::Contains("cannot open"));
  }
  SECTION("shorter than the length prefix") {
    spit(p, "abc");
    CHECK_THAT(read_error(p), Catch::Contains(p) && Catch::Contains("truncated"));
  }
  SECTION("header length beyond the file") {
    std::string f = make_file(hdr(ok_entry), data);
    f[0] = char(0xff);
    f[1] = char(0x0f);
    spit(p, f);
    CHECK_THAT(read_error(p), Catch::Contains("beyond the end of the file"));
  }
  SECTION("absurd header length") {
    std::string f = make_file(hdr(ok_entry), data);
    f[7] = char(0x7f);
    spit(p, f);
    CHECK_THAT(read_error(p), Catch::Contains("exceeds the limit"));
  }
  SECTION("truncated data") {
    spit(p, make_file(hdr(ok_entry), data.substr(0, 10)));
    CHECK_THAT(read_error(p), Catch::Contains("tensor 'w'") && Catch::Contains("out of range"));
  }
  SECTION("header is not JSON") {
    spit(p, make_file("{\"w\": [", data));
    CHECK_THAT(read_error(p), Catch::Contains("not valid JSON"));
  }
  SECTION("unknown dtype") {
    spit(p, make_file(hdr(R"("w":{"dtype":"F33","shape":[2,2],"data_offsets":[0,16]})"), data));
    CHECK_THAT(read_error(p), Catch::Contains("tensor 'w'") && Catch::Contains("unknown dtype 'F33'"));
  }
  SECTION("shape does not match the byte count") {
    spit(p, make_file(hdr(R"("w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]})"), data));
    CHECK_THAT(read_error(p), Catch::Contains("tensor 'w'") && Catch::Contains("needs 24 bytes"));
  }
  SECTION("offsets out of range") {
    spit(p, make_file(hdr(R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]})"), data));
    CHECK_THAT(read_error(p), Catch::Contains("tensor 'w'") && Catch::Contains("out of range"));
  }
  SECTION("offsets reversed") {
    spit(p, make_file(hdr(R"("w":{"dtype":"F32","shape":[0],"data_offsets":[16,0]})"), data));
    CHECK_THAT(read_error(p), Catch::Contains("tensor 'w'"));
  }
  SECTION("overlapping tensors") {
    spit(p, make_file(hdr(ok_entry + R"(,"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]})"), data));
    CHECK_THAT(read_error(p), Catch::Contains("overlap or leave a gap"));
  }
  SECTION("trailing bytes") {
    spit(p, make_file(hdr(ok_entry), data + "xxxx"));
    CHECK_THAT(read_error(p), Catch::Contains("tensors cover 16"));
  }
  SECTION("entry without data_offsets") {
    spit(p, make_file(hdr(R"("w":{"dtype":"F32","shape":[2,2]})"), data));
    CHECK_THAT(read_error(p), Catch::Contains("tensor 'w'") && Catch::Contains("data_offsets"));
  }
  SECTION("negative dimension") {
    spit(p, make_file(hdr(R"("w":{"dtype":"F32","shape":[-2,2],"data_offsets":[0,16]})"), data));
    CHECK_THAT(read_error(p), Catch::Contains("tensor 'w'") && Catch::Contains("negative"));
  }
  SECTION("metadata value that is not a string") {
    spit(p, make_file(hdr(ok_entry + R"(,"__metadata__":{"step":3})"), data));
    CHECK_THAT(read_error(p), Catch::Contains("__metadata__"));
  }
}

// --- Integrity (issue 22, item 6): a checksum per tensor, written with it, checked on every read.

TEST_CASE("safetensors: every tensor's XXH3 in the metadata; a flipped bit names the file and the tensor",
          "[safetensors][integrity]") {
  TempDir d;
  const std::string p = d.path + "/c.safetensors";
  write_safetensors(p, {f32("w", {2, 2}, {1, 2, 3, 4}), f32("b", {2}, {5, 6})}, {{"step", "3"}});
  const std::string raw = slurp(p);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(raw[size_t(i)])) << (8 * i);
  const auto meta_json = nlohmann::json::parse(raw.substr(8, n))["__metadata__"];
  // Free-form strings, as the format has them: 16 hex digits per tensor, beside the caller's.
  CHECK(meta_json["step"] == "3");
  REQUIRE(meta_json.contains("xxh3_64.w"));
  CHECK(meta_json["xxh3_64.w"].get<std::string>().size() == 16);
  CHECK(meta_json.contains("xxh3_64.b"));
  std::map<std::string, std::string> meta;
  read_safetensors(p, &meta);
  CHECK(meta == std::map<std::string, std::string>{{"step", "3"}});  // the checksums are the reader's

  // Every bit of every tensor's bytes is covered.
  for (size_t byte = 8 + n; byte < raw.size(); ++byte) {
    for (int bit : {0, 7}) {
      std::string f = raw;
      f[byte] = char(uint8_t(f[byte]) ^ (1u << bit));
      spit(p, f);
      const std::string e = read_error(p);
      INFO("byte " << byte << " bit " << bit << ": " << e);
      REQUIRE_THAT(e, Catch::Contains(p) && Catch::Contains(byte < 8 + n + 16 ? "tensor 'w'" : "tensor 'b'") &&
                          Catch::Contains("do not match the checksum"));
    }
  }
  // A tensor renamed in the header (a flipped bit there) has no checksum of its own.
  std::string renamed = raw;
  const size_t at = renamed.find("\"b\":");
  REQUIRE(at != std::string::npos);
  renamed[at + 1] = 'c';
  spit(p, renamed);
  CHECK_THAT(read_error(p), Catch::Contains("tensor 'c' has no checksum"));
}

TEST_CASE("a NaN or inf weight is refused at load, naming the file and the tensor", "[safetensors][integrity]") {
  auto ops = make_cpu_ops(1);
  Model model(small_model(18, 4, 3), *ops);
  model.init(1);
  ModelState s = model.get_state();
  std::vector<StTensor> ts = model_state_to_tensors(model, s);
  CHECK_NOTHROW(model_state_from_tensors(model, ts, "ckpt.safetensors"));
  auto named = [](std::vector<StTensor>& v, const std::string& name) -> StTensor& {
    for (StTensor& t : v)
      if (t.name == name) return t;
    FAIL("no tensor " << name);
    throw 0;
  };
  const std::vector<std::pair<float, const char*>> cases = {
      {std::nanf(""), "layer1.0.conv2.weight"}, {INFINITY, "bn1.running_var"}, {-INFINITY, "fc.bias"}};
  for (const auto& [bad, name] : cases) {
    std::vector<StTensor> t = ts;
    StTensor& w = named(t, name);
    reinterpret_cast<float*>(w.data.data())[1] = bad;
    const char* what = std::isnan(bad) ? "holds NaN" : bad > 0 ? "holds inf" : "holds -inf";
    CHECK_THROWS_WITH(model_state_from_tensors(model, t, "ckpt.safetensors"),
                      Catch::Contains("ckpt.safetensors: tensor '" + w.name + "' " + what) &&
                          Catch::Contains("1 non-finite value(s)"));
  }
}
