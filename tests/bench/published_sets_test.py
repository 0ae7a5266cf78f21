"""bench/predict_vs_published.py on a data folder that holds another GPU's MPT table (the form of
shared/calibration/mpt-a100.json): it becomes its own set, priced on that GPU's preset, and a row
of a GPU with no preset is refused by name; an amp_fp8 table (llm-foundry's "H100 80GB FP8") is priced in
FP8, and refused by row on a GPU without FP8. Run by ctest (bench.published_sets); skipped (77)
where the shared calibration folder is not beside the checkout."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
import published_sets  # noqa: E402


def run(binary, data, *extra):
    return subprocess.run([sys.executable, os.path.join(BENCH, "predict_vs_published.py"), "--bin", binary,
                           "--data", data, *extra], capture_output=True, text=True)


def main():
    binary = sys.argv[1]
    if not os.path.isfile(os.path.join(published_sets.DATA, "mpt-a100.json")):
        print("no shared calibration folder at %s: skipped" % published_sets.DATA)
        return 77
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for f in ("published-runs.json", "vtrain-a100.json", "mpt-a100.json"):
            shutil.copy(os.path.join(published_sets.DATA, f), d)
        src = json.load(open(os.path.join(d, "mpt-a100.json")))
        h100 = dict(src)
        h100["rows"] = [dict(r, gpu="h100_80gb", precision="amp_bf16",
                             table="H100 80GB BF16 with 3200 Gbps node-node interconnect (RoCE)")
                        for r in src["rows"] if r["gpu"] == "a100_80gb"][:6]
        json.dump(h100, open(os.path.join(d, "mpt-h100.json"), "w"))
        # llm-foundry's "H100 80GB FP8" table: amp_fp8 (Transformer Engine's FP8 linears), priced as
        # predict --precision fp8 with FSDP's DEFAULT mixed precision.
        fp8 = dict(h100)
        fp8["rows"] = [dict(r, precision="amp_fp8", table="H100 80GB FP8") for r in h100["rows"]]
        json.dump(fp8, open(os.path.join(d, "mpt-h100fp8.json"), "w"))
        out = run(binary, d, "--json")
        if out.returncode != 0:
            failures.append("exit %d: %s" % (out.returncode, out.stderr[-500:]))
        else:
            res = json.loads(out.stdout.splitlines()[-1])
            s = res["summaries"]
            if s.get("mpt-h100", {}).get("priced") != 6:
                failures.append("mpt-h100 set: %s" % s.get("mpt-h100"))
            if s["mpt-fsdp"]["priced"] != len(src["rows"]):
                failures.append("mpt-fsdp priced %d of %d" % (s["mpt-fsdp"]["priced"], len(src["rows"])))
            h = [r for r in res["rows"] if r["set"] == "mpt-h100"]
            if not h or any(r["line"]["cluster"] != "h100-80gb-x8" for r in h):
                failures.append("h100 rows' cluster: %s" % sorted({r["line"]["cluster"] for r in h}))
            a = [] if not h else [r for r in res["rows"] if r["set"] == "mpt-fsdp" and r["gpu"] == "a100_80gb" and r["label"] == h[0]["label"].replace("h100", "a100")]
            if not h:
                pass
            elif not a:
                failures.append("no A100 row of the label %r to compare the H100 row with" % h[0]["label"])
            elif not h[0]["predicted_s"] < a[0]["predicted_s"]:
                failures.append("the same row on H100 (%.3f s) is not faster than on A100 (%.3f s)" % (h[0]["predicted_s"], a[0]["predicted_s"]))
            f8 = [r for r in res["rows"] if r["set"] == "mpt-h100fp8"]
            if s.get("mpt-h100fp8", {}).get("priced") != 6 or any(r["line"]["precision"] != "fp8" for r in f8):
                failures.append("mpt-h100fp8 set: %s, precisions %s" % (s.get("mpt-h100fp8"), sorted({r["line"]["precision"] for r in f8})))
            elif h and not f8[0]["predicted_s"] < h[0]["predicted_s"]:
                failures.append("the same row in FP8 (%.3f s) is not faster than in bf16 (%.3f s)" % (f8[0]["predicted_s"], h[0]["predicted_s"]))
        os.remove(os.path.join(d, "mpt-h100fp8.json"))
        # amp_fp8 on a GPU without FP8 tensor cores is refused by file and row.
        fp8["rows"][0]["gpu"] = "a100_80gb"
        json.dump(fp8, open(os.path.join(d, "mpt-a100fp8.json"), "w"))
        out = run(binary, d)
        said = out.stderr + out.stdout
        if out.returncode == 0 or "mpt-a100fp8.json row 0" not in said or "FP8" not in said:
            failures.append("amp_fp8 on an A100: exit %d, %s" % (out.returncode, said[-300:]))
        os.remove(os.path.join(d, "mpt-a100fp8.json"))
        h100["rows"][0]["gpu"] = "mi300x"
        json.dump(h100, open(os.path.join(d, "mpt-h100.json"), "w"))
        out = run(binary, d)
        said = out.stderr + out.stdout
        if out.returncode == 0 or "mi300x" not in said or "a100_80gb" not in said or "mpt-h100.json row 0" not in said:
            failures.append("an unknown gpu: exit %d, %s" % (out.returncode, (out.stderr + out.stdout)[-300:]))
    for f in failures:
        print("FAIL: " + f)
    print("%d failures" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
