// The file index of an image data set: which files, with which labels, in which order.
//
// Two layouts:
//   - ImageFolder, as torchvision's: DIR/<split>/<class>/**/<file>, classes sorted by name and
//     numbered from 0, files taken in torchvision's order (the class's folders walked and sorted,
//     file names sorted) when their extension is one of torchvision's IMG_EXTENSIONS (case
//     does not matter). So sample i and its label are torchvision's ImageFolder's sample i.
//   - A list file: one `path label` per line (the label is the last field, so paths may hold
//     spaces), paths relative to the list file's folder (or absolute); blank lines and lines
//     starting with '#' are ignored; there are max(label) + 1 classes.
//
// Scanning a folder reads directory entries only (no stat per file), and the result is cached
// (dataset_cache.h), so 1.3 M files take seconds the first time and a fraction of that after.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace worker {

struct DatasetIndex {
  std::string root;                 // folder the paths are relative to (absolute)
  std::vector<std::string> classes; // ImageFolder: class folder names, sorted; list file: empty
  int num_classes = 0;
  // All paths in one buffer: path i is blob[offsets[i], offsets[i + 1]), relative to root.
  std::string blob;
  std::vector<uint64_t> offsets{0};
  std::vector<int32_t> labels;
  // Directories of the scan with their modification times (ns): the cache is valid while none
  // of them changed (an added, removed or renamed entry changes its folder's mtime).
  std::vector<std::pair<std::string, int64_t>> dirs;

  int64_t size() const { return int64_t(labels.size()); }
  std::string_view rel_path(int64_t i) const {
    return std::string_view(blob).substr(offsets[size_t(i)], offsets[size_t(i) + 1] - offsets[size_t(i)]);
  }
  std::string path(int64_t i) const;  // root + '/' + relative path
  void add(std::string_view rel, int32_t label);
};

// torchvision's IMG_EXTENSIONS, lower case.
const std::vector<std::string>& image_extensions();
bool has_image_extension(std::string_view name);

// Scans DIR (one split of an ImageFolder: DIR/<class>/...). Throws DataError for a missing or
// empty folder and for a class folder without images.
DatasetIndex scan_image_folder(const std::string& dir);
// Reads a list file. Throws DataError naming the file and line of a malformed entry.
DatasetIndex read_list_file(const std::string& path);

// True when none of the index's directories changed since the scan.
bool index_is_current(const DatasetIndex& idx);

}  // namespace worker
