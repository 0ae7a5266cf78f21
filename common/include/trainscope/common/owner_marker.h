// trainscope/common/owner_marker.h — the marker that makes a temporary folder provably ours, and
// tells whether the process that made it is gone (the checkpoint's `.DIR.tmp-*` folders,
// runtime/src/state/temp_folders.h; the tuner's private study copies in $TMPDIR, tuner/study.h).
//
// A marker is a small JSON file written first into the folder (O_EXCL, O_NOFOLLOW, fsync'd): its
// format, the name it was made for, the writer's host, pid, process start time (clock ticks after
// boot, /proc/PID/stat field 22) and boot id, and uid. Its writer is gone when it names this host and
// either another boot, or a pid with no process or one started at another time; anything not
// provably gone (another host, a damaged marker) counts as alive.
#pragma once

#include <string>

namespace trainscope::owner {

// Writes the marker `path` (must not exist) for `for_name` under `format`. Throws UserError naming
// `field` when it cannot be written.
void writeMarker(const std::string& path, const std::string& format, const std::string& for_name,
                 const std::string& field);

// The marker `name` in the folder open at `dir_fd`, when it is a regular file (not a link) of this
// user's in `format`.
struct Marker {
  bool valid = false;        // found, ours, in that format
  std::string for_name;      // what it was made for
  bool writer_alive = true;  // its writer may still be running (see the top of this file)
};
Marker readMarker(int dir_fd, const char* name, const std::string& format);

}  // namespace trainscope::owner
