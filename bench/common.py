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
