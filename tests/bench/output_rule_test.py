"""bench/common.py's output_file and check_output: the rule of every trainscope output for the bench
scripts (files::OutputRule). Each hazard at the path is refused and kept; a fresh path, an earlier
output and --overwrite of a regular file are written. Run by ctest (bench.output_rule)."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
from common import OutputRefused, output_file  # noqa: E402


def snapshot(p):
    if not os.path.lexists(p):
        return "missing"
    if os.path.islink(p):
        t = os.readlink(p)
        return "link " + t + ":" + (open(t).read() if os.path.isfile(t) else "")
    if os.path.isdir(p):
        return "dir " + " ".join(sorted(os.listdir(p)))
    if os.path.isfile(p):
        return "file " + open(p, "rb").read().hex()
    return "other %o" % os.lstat(p).st_mode


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "input.db")
        with open(src, "w") as f:
            f.write("the input\n")
        target = os.path.join(d, "target.txt")
        with open(target, "w") as f:
            f.write("someone else's\n")
        cases = {"input": src, "input-wal": src + "-wal", "text": os.path.join(d, "text.txt"),
                 "fifo": os.path.join(d, "fifo"), "link": os.path.join(d, "link"), "dir": os.path.join(d, "dir")}
        with open(cases["text"], "w") as f:
            f.write("precious\n")
        os.mkfifo(cases["fifo"])
        os.symlink(target, cases["link"])
        os.mkdir(cases["dir"])
        for name, p in cases.items():
            before = snapshot(p)
            try:
                with output_file(p, inputs=[src]) as f:
                    f.write("new\n")
                failures.append(f"{name}: written")
            except OutputRefused:
                pass
            if snapshot(p) != before:
                failures.append(f"{name}: changed")
        for name in ("fifo", "dir"):  # never, even with overwrite
            try:
                with output_file(cases[name], overwrite=True) as f:
                    f.write("new\n")
                failures.append(f"{name}: written with overwrite")
            except OutputRefused:
                pass
        fresh = os.path.join(d, "fresh.json")
        with output_file(fresh) as f:
            f.write("1\n")
        with output_file(fresh, earlier=lambda p: open(p).read() == "1\n") as f:  # an earlier output
            f.write("2\n")
        with output_file(cases["text"], overwrite=True) as f:
            f.write("replaced\n")
        with output_file(cases["link"], overwrite=True) as f:  # the link itself, not its target
            f.write("replaced\n")
        if open(fresh).read() != "2\n" or open(cases["text"]).read() != "replaced\n":
            failures.append("not written where allowed")
        if os.path.islink(cases["link"]) or open(target).read() != "someone else's\n":
            failures.append("the link's target was written, or the link kept")
        if any(".tmp-" in n for n in os.listdir(d)):
            failures.append("a temporary file was left")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
