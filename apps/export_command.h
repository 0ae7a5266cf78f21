// export_command.h — `trainscope export STUDY --format …`: a study's winner in another tool's format.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace trainscope::apps {

// `trainscope export STUDY.db --format FORMAT [--trial N] [-o FILE [--overwrite]]` (the formats:
// tuner/export.h): the recommended (or the given candidate's) configuration in that format,
// on stdout or to `out`. The study is opened read-only; `out` must not be the study or beside it
// (its -wal, -shm), must not exist unless `overwrite`, and is written atomically (files.h).
// `reduce_dtype` (--reduce-dtype): DeepSpeed's communication_data_type ("default": the model's dtype);
// refused for the other formats.
int exportStudy(const std::string& study, const std::string& format, std::optional<int64_t> trial,
                const std::string& out, bool overwrite, const std::string& reduce_dtype = "default");

}  // namespace trainscope::apps
