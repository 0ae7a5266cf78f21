// temp_folders.h — the folders a checkpoint is written into before it takes DIR's place, and the
// removal of what a checkpoint leaves behind (internal to the runtime; docs/checkpoints.md).
//
// Rank 0 makes `.DIR.tmp-XXXXXX` beside DIR (mkdtemp) and writes into it first a marker,
// `.trainscope-writing` (common/owner_marker.h): the folder's DIR, the writer's host, pid, process
// start time (clock ticks since boot, /proc/PID/stat) and boot id. The marker is removed just before
// the folder takes DIR's place, so a checkpoint never holds it. A save killed mid-write leaves the
// folder with its marker; the next save into DIR removes it when it is provably ours:
//   - its name is `.` + DIR's name + `.tmp-` + six letters or digits, in DIR's folder;
//   - it is a folder (not a link) owned by this user, and its marker a regular file (not a link)
//     owned by this user, naming the same DIR and this host;
//   - its writer is gone: no process with that pid, or one started at another time, or another boot.
// Then only the names a checkpoint has are removed from it (each relative to the folder opened once,
// O_NOFOLLOW, so that nothing is reached through a link swapped in meanwhile), and the folder only
// when that leaves it empty. Anything else is left as it is.
#pragma once

#include <string>
#include <vector>

namespace trainscope::runtime {

// A path's last component and its folder, trailing slashes ignored ("a/b/" → "b", "a").
std::string baseName(std::string p);
std::string parentOf(std::string p);

// The marker's name in a temporary folder.
inline constexpr const char* kTempMarker = ".trainscope-writing";

// Writes the marker into the new temporary folder `tmp` of checkpoint `dir` (the first file in it).
void writeTempMarker(const std::string& tmp, const std::string& dir);
// Removes the marker of `tmp` (before the swap). No error when there is none.
void removeTempMarker(const std::string& tmp);

// Removes, from the folder at `path` (opened without following a link; must be the entry whose device
// and inode are given when they are non-zero), the files a checkpoint has (config.json, model*.safetensors,
// model.safetensors.index.json, trainscope/state.json, trainscope/optimizer*.safetensors, the marker),
// then the folder itself when that leaves it empty. Returns whether the folder is gone.
bool removeCheckpointFiles(const std::string& path, unsigned long long dev = 0, unsigned long long ino = 0);

// The stale temporary folders of `dir` (see the top of this file) removed; returns their paths.
// Folders that look alike but are not provably ours, or whose writer lives, are left.
std::vector<std::string> removeStaleTemps(const std::string& dir);

}  // namespace trainscope::runtime
