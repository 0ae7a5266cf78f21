"""A job's own torch.profiler beside the probe's, in a profile trial (TRAINSCOPE_PROBE_PROFILE_STEPS).

Kineto holds one profiler a process. With torch 2.11 two clash and end the job: a job's profiler
running when the probe's starts is ended by the probe's stop, and the job's own exit then raises
"Can't disable Kineto profiler when it's not running"; a job's profiler that is only prepared (a
schedule's warm-up) when the probe's starts makes the probe's start raise the same. Only a running
profiler is visible to torch (torch.autograd._profiler_enabled); a prepared one is not.

install() wraps `torch.autograd.profiler.profile` (what torch.profiler.profile, its schedules, and HF
callbacks built on either run underneath) at class level: `_prepare_trace` / `_start_trace` of a
profiler that is not the probe's tell the probe the job's profiler starts (the probe's own trace is
stopped first, kept where it holds a whole step), `__exit__` that it ended. The probe does not start
its trace while a job's profiler is prepared or running; a profiler's error in the probe's own start
or stop is a notice (rank<R>.notice.json, the trial's message), never the job's failure. The job's
steps and memory are measured either way. tests/runner/probe_profiler_test.py runs each order.
"""
import trainscope_probe as probe


def _job_call(method, event):
    def hooked(self, *a, **kw):
        p = probe._probe
        if p is not None and not p._own_call:
            try:
                getattr(p, event)(id(self))
            except Exception as e:  # noqa: BLE001 — the probe's bookkeeping never fails the job's profiler
                p._note(f"the probe's handling of the job's torch.profiler failed ({type(e).__name__}: {e})")
        return method(self, *a, **kw)

    hooked._trainscope_probe = True
    hooked.__wrapped__ = method
    hooked.__name__ = method.__name__
    return hooked


def install():
    from torch.autograd import profiler

    cls = profiler.profile
    if cls.__dict__.get("_trainscope_probe", False):
        return
    cls._trainscope_probe = True
    cls._prepare_trace = _job_call(cls._prepare_trace, "job_profiler_starts")
    cls._start_trace = _job_call(cls._start_trace, "job_profiler_starts")
    cls.__exit__ = _job_call(cls.__exit__, "job_profiler_ends")
