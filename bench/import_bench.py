#!/usr/bin/env python3
"""bench/import_bench.py [EVENTS] — `trainscope import` on a generated PyTorch-profiler (Kineto) trace.

Writes a trace of EVENTS complete events (default 2,000,000: CPU ops, launches, kernels with
correlation and launch dimensions, copies launched by cudaMemcpyAsync with their correlation ids,
a ProfilerStep#N every 10,000 launches spanning its ops; epoch-scale fractional-microsecond times,
as real traces have), imports it, and prints the wall time, events per second and the
import's peak resident memory (GNU time's maximum RSS). Figures, not pass/fail.
"""
import os, random, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import output_file  # noqa: E402  (the rule of every trainscope output)

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cli = os.environ.get("TRAINSCOPE", os.path.join(root, "build", "bin", "trainscope"))
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000
work = os.environ.get("TRAINSCOPE_BENCH_DIR", "/tmp/trainscope-import-bench")
os.makedirs(work, exist_ok=True)
launches_per_step = 10_000  # a profiler step every this many launches, as a training loop's are
trace = os.path.join(work, f"kineto-v2-{n}.json")  # v2: regular steps, correlated copies

if not os.path.exists(trace):
    rnd = random.Random(1)
    t0 = time.time()
    base = 1_700_000_000_000_000.0  # us
    with output_file(trace) as f:  # a random name beside it, put in place when complete
        f.write('{"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [\n')
        t, gpu, corr, written, step, launches, step_start = base, base, 1, 0, 0, 0, base
        names = ["aten::mm", "aten::add", "aten::gelu", "aten::layer_norm", "aten::softmax"]
        kernels = ["ampere_sgemm_128x64_tn", "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
                   "void at::native::(anonymous namespace)::GeluCUDAKernelImpl", "layer_norm_kernel", "softmax_warp_forward"]
        sep = ""

        def emit(text):
            global sep
            f.write(sep + text)
            sep = ",\n"

        def end_step():  # ProfilerStep#N spans its ops on the CPU, as torch.profiler writes it
            global step, written
            emit('{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#%d", "pid": 1, "tid": 1, '
                 '"ts": %.3f, "dur": %.3f}' % (step, step_start, t - step_start))
            step, written = step + 1, written + 1

        while written < n:
            k = rnd.randrange(5)
            d = 8.0 + rnd.random() * 20
            emit('{"ph": "X", "cat": "cpu_op", "name": "%s", "pid": 1, "tid": 1, "ts": %.3f, "dur": %.3f, '
                 '"args": {"Sequence number": %d, "Input Dims": [[64, 1024], [1024, 1024]]}}' % (names[k], t, d, written))
            emit('{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": %.3f, '
                 '"dur": 3.125, "args": {"correlation": %d}}' % (t + 1.5, corr))
            gpu = max(gpu, t + 6.0)
            kd = d * (0.5 + rnd.random())
            emit('{"ph": "X", "cat": "kernel", "name": "%s", "pid": 0, "tid": 7, "ts": %.3f, "dur": %.3f, '
                 '"args": {"device": 0, "stream": 7, "correlation": %d, "registers per thread": 64, '
                 '"shared memory": 8192, "grid": [128, 1, 1], "block": [256, 1, 1]}}' % (kernels[k], gpu, kd, corr))
            gpu += kd
            corr += 1
            written += 3
            if k == 0:  # a copy, launched by cudaMemcpyAsync (the same correlation id on both)
                emit('{"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": %.3f, '
                     '"dur": 2.0, "args": {"correlation": %d}}' % (t + d - 2.5, corr))
                gpu = max(gpu, t + d)
                emit('{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "pid": 0, "tid": 7, '
                     '"ts": %.3f, "dur": 2.5, "args": {"device": 0, "stream": 7, "correlation": %d, "bytes": 65536}}'
                     % (gpu, corr))
                gpu += 2.5
                corr += 1
                written += 2
            t += d + 0.75
            launches += 1
            if launches % launches_per_step == 0:
                end_step()
                step_start = t
        if t > step_start:
            end_step()
        f.write('\n], "baseTimeNanoseconds": 0}\n')
    print(f"[bench] wrote {trace}: {written} events in {step} steps of {launches_per_step} launches, "
          f"{os.path.getsize(trace) / 2**20:.0f} MiB in {time.time() - t0:.0f} s")

size = os.path.getsize(trace)
with open(trace, "rb") as f:  # warm the page cache: the figure is the importer's, not the disk's
    while f.read(1 << 24):
        pass
out = os.path.join(work, "imported.db")
t0 = time.time()
r = subprocess.run(["/usr/bin/time", "-f", "%M %e", cli, "import", trace, "-o", out, "--overwrite"],
                   capture_output=True, text=True)
wall = time.time() - t0
if r.returncode != 0:
    sys.exit(f"import failed: {r.stdout}{r.stderr}")
rss_kib, _ = r.stderr.strip().splitlines()[-1].split()
print(r.stdout.strip())
print(f"[bench] import of {n} events ({size / 2**20:.0f} MiB JSON): {wall:.1f} s wall, {n / wall:,.0f} events/s, "
      f"peak RSS {int(rss_kib) / 1024:.0f} MiB")
