// study_copy_test.cpp — the private study copies in $TMPDIR that a reader killed mid-read leaves
// (tuner/study.h, removeStaleStudyCopies): removed when provably ours, look-alikes left as they are.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "trainscope/common/owner_marker.h"
#include "trainscope/tuner/study.h"

namespace tn = trainscope::tuner;

namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return ::lstat(p.c_str(), &st) == 0;
}

void touch(const std::string& p, const std::string& text = "x") { std::ofstream(p) << text; }

// A copy folder as a reader makes it: the marker first (written by `writer`: this process, or a
// child that has ended by the time the sweep runs), then the copy's files.
void makeCopy(const std::string& dir, bool dead_writer, const char* format = "trainscope-study-copy") {
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  if (dead_writer) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      try {
        trainscope::owner::writeMarker(dir + "/.trainscope-reading", format, "study.db", "study");
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);  // the reader is gone: as after a kill -9
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  } else {
    trainscope::owner::writeMarker(dir + "/.trainscope-reading", format, "study.db", "study");
  }
  touch(dir + "/study.db");
  touch(dir + "/study.db-wal");
  touch(dir + "/study.db-shm");
}

}  // namespace

TEST(StudyCopy, AKilledReadersCopyIsRemovedAndLookAlikesAreLeft) {
  char t[] = "/tmp/study_copy_test.XXXXXX";
  const std::string tmp = ::mkdtemp(t);
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", tmp.c_str(), 1);
  const std::string dead = tmp + "/trainscope-study-aB3xY9", live = tmp + "/trainscope-study-live01",
                    other_format = tmp + "/trainscope-study-fmt001", extra = tmp + "/trainscope-study-extra1",
                    no_marker = tmp + "/trainscope-study-nomark", bad_name = tmp + "/trainscope-study-toolong1",
                    link = tmp + "/trainscope-study-link01", file = tmp + "/trainscope-study-file01";
  makeCopy(dead, true);
  makeCopy(live, false);                     // its reader (this process) still runs
  makeCopy(other_format, true, "something-else");
  makeCopy(extra, true);
  touch(extra + "/notes.txt");               // not a copy's file: kept, and so its folder
  ASSERT_EQ(::mkdir(no_marker.c_str(), 0700), 0);
  touch(no_marker + "/study.db");
  makeCopy(bad_name, true);                  // not the mkdtemp name
  ASSERT_EQ(::mkdir((tmp + "/target").c_str(), 0700), 0);
  makeCopy(tmp + "/target/inner", true);
  ASSERT_EQ(::symlink((tmp + "/target/inner").c_str(), link.c_str()), 0);  // a link to a dead copy
  touch(file);

  const std::vector<std::string> removed = tn::removeStaleStudyCopies();
  EXPECT_EQ(removed, std::vector<std::string>{dead});
  EXPECT_FALSE(exists(dead));
  EXPECT_TRUE(exists(live + "/study.db") && exists(live + "/.trainscope-reading"));
  EXPECT_TRUE(exists(other_format + "/study.db"));
  EXPECT_TRUE(exists(extra + "/notes.txt"));
  EXPECT_FALSE(exists(extra + "/study.db"));  // a dead reader's copy files go; what is not one stays
  EXPECT_TRUE(exists(no_marker + "/study.db"));
  EXPECT_TRUE(exists(bad_name + "/study.db"));
  EXPECT_TRUE(exists(tmp + "/target/inner/study.db"));  // never reached through the link
  EXPECT_TRUE(exists(link) && exists(file));

  if (old) ::setenv("TMPDIR", saved.c_str(), 1);
  else ::unsetenv("TMPDIR");
  std::system(("rm -rf '" + tmp + "'").c_str());
}
