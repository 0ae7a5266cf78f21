#!/usr/bin/env bash
# tests/fuzz/make_seeds.sh [BUILD_DIR] — regenerate the seed corpora in tests/fuzz/corpus/ (checked in;
# run this only to change them). Small valid inputs, in the layouts tests/core/import_test.cpp builds:
#   import/  Kineto JSON (two profiler steps on one GPU; plain, gzipped, one without steps) and a tiny
#            Nsight Systems SQLite export;
#   reader/  run databases written by this build's own `trainscope import` and `trainscope run`
#            (steps only, traced, two ranks with collectives), rewritten with 512-byte pages so that
#            each is a few kilobytes.
# Needs python3, sqlite3 and a built trainscope (BUILD_DIR, default ./build).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
ts=$build/bin/trainscope
imp=$root/tests/fuzz/corpus/import
rd=$root/tests/fuzz/corpus/reader
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$imp" "$rd"

python3 - "$imp" <<'EOF'
import gzip, json, sys
out = sys.argv[1]
def kineto(rank, steps=2, step_names=True):
    ev = []
    for k in range(steps):
        t = 1000.0 * k
        if step_names:
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{k + 5}", "pid": 1, "tid": 1,
                       "ts": t, "dur": 900.0})
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t + 10, "dur": 50.0,
                   "args": {"Sequence number": 7, "Input Dims": [[64, 64], [64, 64]]}})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 20,
                   "dur": 5.0, "args": {"correlation": 100 + k}})
        ev.append({"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_nn", "pid": 0, "tid": 7, "ts": t + 30,
                   "dur": 400.0, "args": {"device": 0, "stream": 7, "correlation": 100 + k,
                                          "registers per thread": 96, "shared memory": 8192,
                                          "grid": [32, 2, 1], "block": [256, 1, 1]}})
        ev.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                   "tid": 20, "ts": t + 300, "dur": 300.0, "args": {"device": 0, "stream": 20,
                                                                   "correlation": 200 + k}})
        ev.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
                   "ts": t + 1, "dur": 8.0, "args": {"device": 0, "stream": 7, "bytes": 4096}})
        ev.append({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 0, "tid": 7, "ts": t + 2,
                   "dur": 3.0, "args": {"device": 0, "stream": 7, "bytes": 1024}})
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": "forward", "pid": 0, "tid": 7, "ts": t + 25,
                   "dur": 500.0})
        ev.append({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 1, "tid": 1, "ts": t + 26,
                   "dur": 2.0, "args": {"correlation": 300 + k}})
    ev.append({"ph": "i", "name": "ignored instant", "ts": 1.0})
    return {"schemaVersion": 1, "baseTimeNanoseconds": 1700000000000000000,
            "distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": ev}
dump = lambda j: json.dumps(j, separators=(",", ":"))
open(f"{out}/kineto.json", "w").write(dump(kineto(0)))
open(f"{out}/kineto-rank1.json.gz", "wb").write(gzip.compress(dump(kineto(1)).encode(), mtime=0))
no_steps = kineto(0, steps=1, step_names=False)
del no_steps["distributedInfo"], no_steps["baseTimeNanoseconds"]
open(f"{out}/kineto-no-steps.json", "w").write(dump(no_steps))
EOF

rm -f "$imp/nsys.sqlite"
sqlite3 "$imp/nsys.sqlite" <<'EOF'
PRAGMA page_size = 512;
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,
  streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, shortName INTEGER,
  gridX INTEGER, gridY INTEGER, gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER,
  staticSharedMemory INTEGER, dynamicSharedMemory INTEGER, registersPerThread INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER,
  correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER, category INTEGER,
  color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,
  streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER,
  streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, value INTEGER);
INSERT INTO StringIds VALUES (1, 'volta_sgemm_128x64_nn'), (2, 'cudaLaunchKernel'), (3, 'forward');
INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1200, 1700, 0, 1, 7, 42, 99, 1, 1, 10, 1, 1, 128, 1, 1, 1024, 1024, 64);
INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (1100, 1150, 0, 16777216 + 5, 42, 2, 0, 0);
INSERT INTO NVTX_EVENTS VALUES (1000, 2000, 59, NULL, 0, 0, 'step', 5, 5, NULL, 0);
INSERT INTO NVTX_EVENTS VALUES (1050, 1800, 59, NULL, 0, 0, NULL, 5, 5, 3, 0);
INSERT INTO NVTX_EVENTS VALUES (1900, 1950, 60, NULL, 0, 0, 'ProfilerStep#7', 5, 5, NULL, 0);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (1010, 1090, 0, 1, 7, 41, 99, 65536, 1);
INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (1095, 1099, 0, 1, 7, 43, 99, 4096, 0);
EOF

# A run database in its smallest form: one file (no WAL), 512-byte pages.
shrink() { sqlite3 "$1" "PRAGMA journal_mode = DELETE; PRAGMA page_size = 512; VACUUM;" >/dev/null; cp "$1" "$2"; }
"$ts" import "$imp/kineto.json" "$imp/kineto-rank1.json.gz" -o "$tmp/kineto.db" >/dev/null
shrink "$tmp/kineto.db" "$rd/import-kineto.db"
"$ts" import "$imp/nsys.sqlite" -o "$tmp/nsys.db" >/dev/null
shrink "$tmp/nsys.db" "$rd/import-nsys.db"
"$ts" run --workload tiny --seq 16 --mbs 2 --steps 2 --threads 1 --out "$tmp/steps.db" >/dev/null
shrink "$tmp/steps.db" "$rd/run-steps.db"
"$ts" run --workload tiny --seq 16 --mbs 2 --gbs 4 --steps 2 --nproc 2 --threads 1 --trace "$tmp/trace.db" \
  --trace-level ranges >/dev/null
shrink "$tmp/trace.db" "$rd/run-trace-2ranks.db"
ls -l "$imp" "$rd"
