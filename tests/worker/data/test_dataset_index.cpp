// The file index: torchvision's order, the on-disk cache (round trip, reuse, invalidation) and
// list files. (The order against torchvision itself: check_data.py index.)
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"
#include "worker/data/data_error.h"
#include "worker/data/dataset_cache.h"
#include "worker/data/dataset_index.h"

using namespace worker;

namespace {

using testing_support::TempDir;

void touch(const std::string& p) {
  std::system(("mkdir -p \"$(dirname '" + p + "')\"").c_str());
  std::ofstream(p) << "x";
}

}  // namespace

TEST_CASE("ImageFolder: classes sorted, nested folders walked in sorted order, extensions case-blind") {
  TempDir d;
  touch(d.path + "/train/b/2.JPG");
  touch(d.path + "/train/b/1.png");
  touch(d.path + "/train/b/notes.txt");
  touch(d.path + "/train/a/z/3.jpeg");
  touch(d.path + "/train/a/y.webp");
  const DatasetIndex idx = scan_image_folder(d.path + "/train");
  REQUIRE(idx.classes == std::vector<std::string>{"a", "b"});
  REQUIRE(idx.size() == 4);
  CHECK(idx.rel_path(0) == "a/y.webp");  // os.walk("a") yields "a" before "a/z"
  CHECK(idx.rel_path(1) == "a/z/3.jpeg");
  CHECK(idx.rel_path(2) == "b/1.png");
  CHECK(idx.rel_path(3) == "b/2.JPG");
  CHECK(idx.labels == std::vector<int32_t>{0, 0, 1, 1});
  CHECK(idx.path(2) == idx.root + "/b/1.png");
}

TEST_CASE("ImageFolder errors: missing, empty, a class without images") {
  TempDir d;
  CHECK_THROWS_AS(scan_image_folder(d.path + "/nope"), DataError);
  ::mkdir((d.path + "/train").c_str(), 0755);
  CHECK_THROWS_WITH(scan_image_folder(d.path + "/train"), Catch::Contains("no class folders"));
  touch(d.path + "/train/a/1.jpg");
  touch(d.path + "/train/b/readme.txt");
  CHECK_THROWS_WITH(scan_image_folder(d.path + "/train"), Catch::Contains("with no images: b"));
}

TEST_CASE("index cache: written beside the data, reused, invalidated by a new file") {
  TempDir d;
  touch(d.path + "/train/a/1.jpg");
  touch(d.path + "/train/b/2.jpg");
  IndexLoad first = load_image_folder(d.path, "train", {});
  CHECK_FALSE(first.from_cache);
  CHECK(first.cache_path == d.path + "/.train_resnet-index.train");
  IndexLoad second = load_image_folder(d.path, "train", {});
  CHECK(second.from_cache);
  CHECK(second.index.blob == first.index.blob);
  CHECK(second.index.labels == first.index.labels);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // mtime granularity of some file systems
  touch(d.path + "/train/b/3.jpg");
  IndexLoad third = load_image_folder(d.path, "train", {});
  CHECK_FALSE(third.from_cache);
  CHECK(third.index.size() == 3);
}

TEST_CASE("index cache: a damaged file is ignored; a read-only data folder falls back") {
  TempDir d;
  touch(d.path + "/train/a/1.jpg");
  DatasetIndex idx = scan_image_folder(d.path + "/train");
  std::string bytes = serialize_index(idx);
  DatasetIndex back;
  REQUIRE(parse_index(bytes, &back));
  CHECK(back.rel_path(0) == "a/1.jpg");
  for (size_t cut : {size_t(0), size_t(9), bytes.size() / 2, bytes.size() - 1}) {
    CHECK_FALSE(parse_index(bytes.substr(0, cut), &back));
  }
  bytes[bytes.size() / 2] ^= 0x55;
  CHECK_FALSE(parse_index(bytes, &back));
  if (::geteuid() != 0) {  // root writes anywhere
    TempDir cache;
    ::chmod(d.path.c_str(), 0555);
    IndexLoad l = load_image_folder(d.path, "train", {cache.path});
    ::chmod(d.path.c_str(), 0755);
    CHECK(l.cache_path.rfind(cache.path, 0) == 0);
  }
}

// Ranks of several nodes writing the cache of a shared data folder at once: under launch's PID
// namespaces they have the same pids, which the temporary names were made of. Threads of one
// process (one pid) are the same case.
TEST_CASE("index cache: concurrent writers never share a temporary file") {
  TempDir d;
  for (int c = 0; c < 20; ++c)
    for (int i = 0; i < 50; ++i) touch(d.path + "/train/c" + std::to_string(c) + "/" + std::to_string(i) + ".jpg");
  const std::string cache = d.path + "/.train_resnet-index.train";
  for (int round = 0; round < 5; ++round) {
    std::remove(cache.c_str());
    std::vector<IndexLoad> loads(6);
    std::vector<std::thread> ts;
    for (auto& l : loads) ts.emplace_back([&] { l = load_image_folder(d.path, "train", {}); });
    for (auto& t : ts) t.join();
    for (const IndexLoad& l : loads) {
      CHECK(l.index.size() == 1000);
      CHECK(l.cache_path == cache);  // a writer whose temporary file another renamed away had none
    }
    IndexLoad again = load_image_folder(d.path, "train", {});
    CHECK(again.from_cache);
    CHECK(again.index.size() == 1000);
  }
  std::string left;
  for (const auto& e : std::filesystem::directory_iterator(d.path))
    if (e.path().filename().string() != "train") left += e.path().filename().string() + " ";
  CHECK(left == ".train_resnet-index.train ");  // no temporary file left behind
  struct stat st{};
  REQUIRE(::stat(cache.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);  // readable by the other users of the data
}

TEST_CASE("list file: path label lines, relative to the file; errors name the line") {
  TempDir d;
  touch(d.path + "/img/a b.jpg");
  {
    std::ofstream f(d.path + "/list.txt");
    f << "# comment\n\nimg/a b.jpg 3\n" << d.path << "/img/a b.jpg\t1\r\n";
  }
  const DatasetIndex idx = read_list_file(d.path + "/list.txt");
  REQUIRE(idx.size() == 2);
  CHECK(idx.num_classes == 4);
  CHECK(idx.path(0) == idx.root + "/img/a b.jpg");
  CHECK(idx.path(1) == d.path + "/img/a b.jpg");
  CHECK(idx.labels == std::vector<int32_t>{3, 1});
  {
    std::ofstream f(d.path + "/bad.txt");
    f << "img/a b.jpg 0\nimg/x.jpg -1\n";
  }
  CHECK_THROWS_WITH(read_list_file(d.path + "/bad.txt"), Catch::Contains("bad.txt:2: label '-1'"));
  std::ofstream(d.path + "/empty.txt") << "# nothing\n";
  CHECK_THROWS_WITH(read_list_file(d.path + "/empty.txt"), Catch::Contains("no entries"));
}
