// main.cpp — trainscope-viewer: FILE.db [FILE2.db] | STUDY.db, interactive or headless (--screenshot).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "app.h"
#include "trainscope/common/error.h"

int main(int argc, char** argv) {
  namespace v = trainscope::viewer;
  v::Options o;
  CLI::App cli{"trainscope-viewer — timelines of every rank, statistics, run comparison and tuner studies"};
  std::string size, view;
  cli.add_option("files", o.files, "a run database (two to compare them), or a tuner study")->required();
  cli.add_option("--screenshot", o.screenshot, "render headless (Xvfb works) and write this PNG, then exit");
  cli.add_option("--size", size, "window size WxH (default 1600x900)");
  cli.add_option("--view", view, "START:END visible window, relative to the trace start (e.g. 0:2.5ms)");
  cli.add_option("--frames", o.frames, "frames to render before the screenshot (default 3)")->check(CLI::Range(1, 100000));
  cli.add_option("--script", o.script, "replay view changes from a file (zoom, pan, select, search; see docs/viewer.md)");
  cli.add_option("--layout", o.layout, "with --screenshot: write where each row was drawn as JSON");
  cli.add_flag("--overwrite", o.overwrite,
               "let --screenshot, --layout and the script's csv replace an existing file that is not an earlier "
               "output of theirs (never an input)");
  cli.add_flag("--frame-stats", o.frame_stats, "print per-frame CPU time, load time and memory per event");
  std::string scale;  // checked below, so that a bad value names the flag and the fix
  cli.add_option("--scale", scale, "scale fonts and sizes by F (0.5-4; default: the monitor's content scale)");
  try {
    cli.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return cli.exit(e);
  } catch (const CLI::ParseError& e) {  // named as the viewer's other bad input is, with the fix
    std::cerr << "trainscope-viewer: " << e.what() << " (fix: see `trainscope-viewer --help`)\n";
    return 2;
  }
  try {
    if (o.files.size() > 2) throw trainscope::UserError("files", "at most two files (two runs to compare)", "");
    if (!size.empty()) {
      int w = 0, h = 0;
      char extra = 0;
      if (std::sscanf(size.c_str(), "%dx%d%c", &w, &h, &extra) != 2 || w < 200 || h < 150 || w > 16384 || h > 16384)
        throw trainscope::UserError("--size", "\"" + size + "\" is not WxH between 200x150 and 16384x16384",
                                    "write e.g. --size 1600x900");
      o.width = w;
      o.height = h;
    }
    if (!view.empty()) {
      const auto colon = view.find(':');
      if (colon == std::string::npos)
        throw trainscope::UserError("--view", "\"" + view + "\" is not START:END", "write e.g. --view 0:2.5ms");
      const double a = v::parseTime(view.substr(0, colon), "--view"), b = v::parseTime(view.substr(colon + 1), "--view");
      if (!(b > a)) throw trainscope::UserError("--view", "END must be after START", "");
      o.view = std::make_pair(a, b);
    }
    if (!scale.empty()) {
      size_t used = 0;
      double f = 0;
      try {
        f = std::stod(scale, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != scale.size() || !(f >= 0.5 && f <= 4))
        throw trainscope::UserError("--scale", "\"" + scale + "\" is not a factor between 0.5 and 4",
                                    "write e.g. --scale 2 for a HiDPI screen, or leave it out to take the monitor's");
      o.scale = float(f);
    }
    v::App app(o);
    return app.run();
  } catch (const trainscope::UserError& e) {
    std::cerr << "trainscope-viewer: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "trainscope-viewer: " << e.what() << "\n";
    return 1;
  }
}
