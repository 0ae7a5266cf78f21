"""Shared helpers of the bench/ scripts."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BIN = os.path.join(ROOT, "build", "bin", "trainscope")


def run_json(cmd):
    """Runs a command that prints one JSON object on its last line, and returns it."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _busy_cpu_s():
    """CPU seconds the whole machine has been busy (all cores; /proc/stat's first line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def run_json_measuring_others(cmd):
    """run_json, and the cores that other processes kept busy meanwhile: the machine's busy CPU time
    less the command's own (its children's rusage), over the wall time. On a shared host this says
    how much of a round's slowdown is someone else's work. Linux only."""
    import resource
    import time
    busy, own = _busy_cpu_s(), resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    result = run_json(cmd)
    wall = time.monotonic() - t
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_s = (ru.ru_utime - own.ru_utime) + (ru.ru_stime - own.ru_stime)
    return result, max(0.0, (_busy_cpu_s() - busy - own_s) / wall)


def wait_for_quiet(below, max_s=120.0, window_s=2.0):
    """Waits (at most max_s) for a window_s window in which other processes keep fewer than `below`
    cores busy; returns the cores measured in the last window. On a shared host it moves a round
    off someone else's build rather than measuring the build."""
    import time
    deadline = time.monotonic() + max_s
    while True:
        busy, t = _busy_cpu_s(), time.monotonic()
        time.sleep(window_s)
        cores = (_busy_cpu_s() - busy) / (time.monotonic() - t)
        if cores < below or time.monotonic() >= deadline:
            return cores


class OutputRefused(Exception):
    """An output path that the rule of every trainscope output refuses (see output_file)."""


def check_output(path, overwrite=False, inputs=(), earlier=None):
    """The rule of every trainscope output (common/include/trainscope/common/files.h, OutputRule),
    for the bench scripts: never one of `inputs` (by device and inode, or by name) nor its
    -wal/-shm/-journal; never a directory, FIFO, device or socket; a symbolic link only with
    `overwrite` (the link itself is replaced); an existing regular file only with `overwrite` or when
    earlier(path) says it is an earlier output of the same kind. Returns whether something is replaced."""
    where = os.path.join(os.path.realpath(os.path.dirname(path) or "."), os.path.basename(path))
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    for src in inputs:
        for side in ("", "-wal", "-shm", "-journal"):
            name = src + side
            same = os.path.join(os.path.realpath(os.path.dirname(name) or "."), os.path.basename(name)) == where
            if not same and st is not None:
                try:
                    same = os.path.samefile(path, name)
                except OSError:
                    pass
            if same:
                raise OutputRefused(f"{path} is {name}, which this script reads: name a new file")
    if st is None:
        return False
    import stat as s
    if s.S_ISDIR(st.st_mode):
        raise OutputRefused(f"{path} is a directory: name a file")
    if s.S_ISLNK(st.st_mode):
        if not overwrite:
            raise OutputRefused(f"{path} is a symbolic link: name a new file, or pass overwrite to replace the link")
        return True
    if not s.S_ISREG(st.st_mode):
        raise OutputRefused(f"{path} exists and is not a regular file (a FIFO, device or socket): name a new file")
    if not overwrite and not (earlier and earlier(path)):
        raise OutputRefused(f"{path} already exists: name a new file, or pass overwrite to replace it")
    return True


class output_file:
    """`with output_file(path) as f: f.write(...)`: written under a random name beside `path` and put
    in place at the end (link(2) for a new path, rename(2) over what check_output allowed), never
    through a link at the path, never half-written. Checked on entry and again before it is placed."""

    def __init__(self, path, mode="w", overwrite=False, inputs=(), earlier=None):
        self.path, self.mode = path, mode
        self.rule = dict(overwrite=overwrite, inputs=tuple(inputs), earlier=earlier)

    def __enter__(self):
        import tempfile
        check_output(self.path, **self.rule)
        folder = os.path.dirname(self.path) or "."
        fd, self.temp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(self.path)[:100] + ".tmp-")
        self.file = os.fdopen(fd, self.mode)
        return self.file

    def __exit__(self, kind, value, tb):
        try:
            if kind is None:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
            if kind is not None:
                return False
            if check_output(self.path, **self.rule):
                os.replace(self.temp, self.path)
            else:
                os.link(self.temp, self.path)  # refuses a path taken meanwhile
        finally:
            if os.path.lexists(self.temp):
                os.unlink(self.temp)
        return False


def ranks(v):
    """Ranks of v from 0, ties given their mean rank (what Spearman's rho needs)."""
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0
        i = j + 1
    return r


def spearman(xs, ys):
    """Spearman's rank correlation of two equal-length lists (nan when either is constant)."""
    rx, ry = ranks(xs), ranks(ys)
    n = len(xs)
    mx, my = sum(rx) / n, sum(ry) / n
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    vx = sum((a - mx) ** 2 for a in rx) ** 0.5
    vy = sum((b - my) ** 2 for b in ry) ** 0.5
    return cov / (vx * vy) if vx and vy else float("nan")


def moe_layer_indices(w):
    """The layers of workload JSON `w` whose MLP is a MoE one: its moe_pattern (one 0/1 per layer) where
    given, else every moe_every-th layer from layer 0 (Workload::moeLayer, workloads/src/workload.cpp)."""
    pattern = w.get("moe_pattern")
    if pattern:
        return [l for l, m in enumerate(pattern) if m]
    return list(range(0, w["n_layer"], w.get("moe_every", 1)))
