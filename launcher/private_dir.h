// Directories of the user's own under a shared one (/tmp): for what other users of the host must
// neither read nor plant -- the Slurm meeting's token file, the port locks. Any local user can
// create /tmp/<name> first, as a file, a symlink or a directory of theirs; what we find there is
// checked, never trusted.
#pragma once

#include <string>

namespace launch {

// `path` as a directory only we may use: made (mode 0700) when missing; UsageError saying what
// is wrong and what to do when it is not a directory (a file, a symlink: not followed), belongs
// to another user, or group or others may use it. `way_out` ends the messages of the first two
// (what to use instead; another user's file in /tmp is not ours to remove).
std::string private_dir(const std::string& path, const std::string& way_out);

// The temporary directory: TMPDIR when set to an absolute path, else /tmp.
std::string temp_dir();

}  // namespace launch
