// The file index of an ImageFolder split, cached on disk so that a restart (or every rank of a
// node) does not walk 1.3 M directory entries again.
//
// Where: in the first writable folder of `cache_dirs` ($XDG_CACHE_HOME/train_resnet or
// ~/.cache/train_resnet, then the launcher's log dir), named after a hash of the split's
// absolute path; only where none is writable beside the data (DIR/.train_resnet-index.<split>),
// which is read too (earlier versions wrote there first). Valid while no directory of the scan has a new mtime (dataset_index.h);
// a cache that is stale, truncated or from another version is ignored and rewritten
// (temporary name, then rename, so concurrent ranks never read a half-written file).
#pragma once

#include <string>
#include <vector>

#include "worker/data/dataset_index.h"

namespace worker {

// Where an index goes: $XDG_CACHE_HOME/train_resnet or ~/.cache/train_resnet, then the
// launcher's log folder (given: it is read from PADDLE_LOG_DIR by proto::read_worker_env, empty
// when none).
std::vector<std::string> default_cache_dirs(const std::string& log_dir);

struct IndexLoad {
  DatasetIndex index;
  bool from_cache = false;
  std::string cache_path;  // where it was read from or written to ("" if nowhere writable)
  double seconds = 0;
};

// Scans DIR/<split> (or reads its cache). Throws DataError as scan_image_folder.
IndexLoad load_image_folder(const std::string& dir, const std::string& split,
                            const std::vector<std::string>& cache_dirs);

// Serialisation (exposed for tests): bytes <-> index; parse returns false on any mismatch.
std::string serialize_index(const DatasetIndex& idx);
bool parse_index(const std::string& bytes, DatasetIndex* out);

}  // namespace worker
