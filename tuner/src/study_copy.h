// study_copy.h — the private copy a study is read from where its folder cannot hold the -shm its
// -wal needs (internal to the tuner; removeStaleStudyCopies in study.h).
#pragma once

#include <memory>
#include <string>

#include "trainscope/rundb/sqlite.h"

namespace trainscope::tuner {

// Opens a study for reading, writing nothing into it or beside it; `copy_dir` is set to the private
// copy's folder when one was made (removeCopy it once the database is closed).
std::unique_ptr<rundb::Database> openForReading(const std::string& path, std::string& copy_dir);
// Removes a private copy's files and its folder ("" : nothing).
void removeCopy(const std::string& dir);

}  // namespace trainscope::tuner
