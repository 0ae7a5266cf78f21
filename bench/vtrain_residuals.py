#!/usr/bin/env python3
"""vtrain_residuals.py — where `trainscope predict` misses vTrain's Megatron-LM runs (issue 33): the
predicted breakdown of the rows against their neighbours, pairs of rows the model cannot tell apart,
and what each candidate physical term would do to the error and the within-group ranking.

  --match TEXT      rows of vtrain-multi whose label contains TEXT (default h8192): measured,
                    predicted, and the predicted parts (compute = forward + backward kernels,
                    recompute, TP, PP sends, bubble, DP all-reduce, optimizer), the gap in seconds
                    and per pipeline slot (the gap over M + p - 1 micro-batch times).
  pairs             rows of one group with the same pipeline depth, the same micro-batch count M and
                    the same work per GPU (mbs / tp): the same per-GPU FLOPs, bubble, send bytes
                    (scatter-gather: act / tp) and DP bytes per NIC — the model prices them within a
                    few percent of each other; the measured ratio says whether something else differs.
  candidates        each candidate term of the issue, computed from the row's shape, added to the
                    prediction: MAPE, median signed error, within-group Spearman per group.
  tp8               vtrain-single: TP 8 (one node) against TP 2 and TP 4 at the same model,
                    micro-batch and global batch (the same op count per layer): measured ms per
                    layer and micro-batch, and the model's.
  split             vtrain-single, no pipeline: per (hidden, tp, mbs), the least-squares split of the
                    step t = a·M·L + b·M + c·L + d over the rows' micro-batches M and layers L into the
                    cost per layer and micro-batch (a) and per micro-batch (b: head, embedding, the
                    micro-batch's fixed work), measured | shipped model | the model's device alone
                    (every host constant 0): where a host-bound row's gap lies, and whether a device
                    term could close it (the device alone must exceed the measured cost to bind).

usage: bench/vtrain_residuals.py [--bin build/bin/trainscope] [--match h8192]
"""
import argparse
import json
import re
import sys
import tempfile

import published_sets
from common import DEFAULT_BIN
from predict_vs_published import median, run_batch, spearman

NIC = 12.5e9 * 0.9  # vTrain's 800 Gb/s per node: 12.5 GB/s a GPU, at the preset's InfiniBand efficiency
HBM = 2.039e12 * 0.85
PARTS = ("compute_s", "recompute_s", "tp_comm_s", "pp_comm_s", "bubble_s", "dp_comm_s", "optimizer_s")


def shape(r):
    """The row's shape and the quantities the candidate terms need (stage 0's parameters per rank)."""
    l = r["line"]
    h, L = map(int, re.match(r"h(\d+) L(\d+)", r["label"]).groups())
    tp, pp, gpus, mbs, gbs = l["tp"], l["pp"], l["gpus"], l["mbs"], l["gbs"]
    dp = gpus // (tp * pp)
    return {"h": h, "L": L, "tp": tp, "pp": pp, "dp": dp, "mbs": mbs, "M": gbs // (dp * mbs),
            "params": (L / pp * 12 * h * h + 50257 * h) / tp,  # stage 0: its layers and the embedding
            "k": max(1, min(dp, 8 // tp)) if tp <= 8 else 1,  # DP members per node (the NICs it owns)
            "act": mbs * 2048 * h * 2.0}                        # one (b, s, h) fp16 activation


def ring(x, bytes_):
    return bytes_ * 2 * (x["dp"] - 1) / x["dp"] if x["dp"] > 1 else 0.0


# Each candidate: the seconds it would add to the prediction (the preset already prices the DP
# all-reduce in fp16 over the k NICs a group's members own, after the backward; the optimizer at 54
# bytes a parameter; the sends at act/tp + an all-gather; the tied embedding's all-reduce).
CANDIDATES = {
    # (a tree across nodes at half the ring's bus bandwidth adds the same seconds as fp32's doubling)
    "DP all-reduce in fp32 (x2 bytes)": lambda x: ring(x, 2 * x["params"]) / (x["k"] * NIC),
    "DP over one NIC per group": lambda x: ring(x, 2 * x["params"]) * (1 / NIC - 1 / (x["k"] * NIC)),
    "optimizer x3 (unfused fp32 passes)": lambda x: 2 * x["params"] * 54 / HBM,
    "grad fp32 copy per micro-batch": lambda x: x["M"] * x["params"] * 6 / HBM,
    "sends without scatter-gather": lambda x: (2 * x["M"] + 2 * (x["pp"] - 1)) * x["act"] * (1 - 1 / x["tp"]) / NIC
    if x["pp"] > 1 else 0.0,
}


def groups_spearman(rows, pred):
    g = {}
    for r in rows:
        g.setdefault(r["group"], []).append((r["measured_s"], pred(r)))
    return {k: spearman([a for a, _ in v], [b for _, b in v]) for k, v in g.items() if len(v) >= 3}


def scan(rows):
    print("candidate terms on vtrain-multi (added to the shipped prediction):")
    print("  %-36s %6s %7s  %s" % ("term", "MAPE", "median", "Spearman per group (h3072 h6144 h8192 h12288) -> median"))
    base = lambda r: r["predicted_s"]
    tests = [("shipped", base)] + [(n, (lambda r, f=f: r["predicted_s"] + f(shape(r)))) for n, f in CANDIDATES.items()]
    for name, pred in tests:
        errs = [pred(r) / r["measured_s"] - 1 for r in rows]
        sp = groups_spearman(rows, pred)
        print("  %-36s %5.1f%% %+6.1f%%  %s -> %.3f" % (name, 100 * sum(map(abs, errs)) / len(errs), 100 * median(errs),
                                                   " ".join("%.2f" % sp[k] for k in sorted(sp, key=lambda k: int(k[1:].split()[0]))),
                                                   median(list(sp.values()))))


def breakdown(rows, match):
    print("vtrain-multi rows matching %r: measured, predicted and its parts (s); gap = measured - predicted" % match)
    print("  %-34s %7s %7s %6s " % ("row", "meas", "pred", "err") + " ".join("%7s" % k[:7] for k in PARTS) + "    gap /slot")
    for r in sorted((r for r in rows if match in r["label"]), key=lambda r: r["label"]):
        t, x = r["result"]["time"], shape(r)
        gap = r["measured_s"] - t["step_s"]
        print("  %-34s %7.2f %7.2f %+5.1f%% " % (r["label"].replace(" s2048", ""), r["measured_s"], t["step_s"],
                                                100 * (t["step_s"] / r["measured_s"] - 1))
              + " ".join("%7.2f" % t[k] for k in PARTS) + "  %6.2f %5.3f" % (gap, gap / (x["M"] + x["pp"] - 1)))


def pairs(rows):
    print("pairs of equal work: same group, pp, M and mbs/tp (the same per-GPU FLOPs, bubble, send bytes and DP bytes per NIC)")
    seen = {}
    for r in rows:
        x = shape(r)
        seen.setdefault((r["group"], x["pp"], x["M"], x["mbs"] / x["tp"]), []).append(r)
    for key, v in sorted(seen.items(), key=lambda kv: kv[0]):
        if len(v) < 2:
            continue
        v.sort(key=lambda r: r["line"]["tp"])
        a, b = v[0], v[-1]
        print("  %-34s vs %-22s measured %+6.1f%%  predicted %+6.1f%%" % (
            a["label"].replace(" s2048", ""), " ".join(b["label"].split()[3:7]),
            100 * (a["measured_s"] / b["measured_s"] - 1), 100 * (a["predicted_s"] / b["predicted_s"] - 1)))


def tp8(rows):
    print("vtrain-single, TP 8 against TP 2 / TP 4 (dp 1, same model, mbs, gbs): ms per layer and micro-batch, measured (model)")
    by = {}
    for r in rows:
        l = r["line"]
        if l["pp"] != 1 or l["gpus"] != l["tp"] or l["tp"] < 2:
            continue
        x = shape(r)
        per = 1000.0 / (x["M"] * x["L"])
        by.setdefault(x["mbs"], {}).setdefault(l["tp"], []).append((r["measured_s"] * per, r["predicted_s"] * per))
    for mbs in sorted(by):
        cells = []
        for tp in (2, 4, 8):
            v = by[mbs].get(tp, [])
            if v:
                cells.append("tp%d %5.2f (%5.2f)" % (tp, median([a for a, _ in v]), median([b for _, b in v])))
        print("  mbs %-2d " % mbs + "   ".join(cells))


def lstsq(X, y):
    """Least squares by the normal equations (a handful of columns; no numpy in bench/)."""
    n = len(X[0])
    A = [[sum(r[i] * r[j] for r in X) for j in range(n)] + [sum(r[i] * v for r, v in zip(X, y))] for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda k: abs(A[k][i]))
        A[i], A[p] = A[p], A[i]
        for k in range(n):
            if k != i and A[i][i]:
                f = A[k][i] / A[i][i]
                A[k] = [a - f * b for a, b in zip(A[k], A[i])]
    return [A[i][n] / A[i][i] if A[i][i] else float("nan") for i in range(n)]


def split(rows, device):
    """Per (hidden, tp, mbs) of the one-node rows without PP (dp 1 where tp > 1; TP 1 rows pooled
    over dp, whose per-GPU work is the same): the per-layer and per-micro-batch costs, ms."""
    print("vtrain-single, pp 1: ms per layer and micro-batch (a) and per micro-batch (b), measured | model | "
          "model's device alone; groups of 5+ rows")
    by = {}
    for r in rows:
        l = r["line"]
        if l["pp"] == 1 and (l["tp"] == 1 or l["gpus"] == l["tp"]) and r["label"] in device:
            by.setdefault((r["hidden"], l["tp"], l["mbs"]), []).append(r)
    print("  %-16s %21s   %21s" % ("hidden tp mbs", "a: meas  model device", "b: meas  model device"))
    for key in sorted(by):
        v = by[key]
        if len(v) < 5:
            continue
        X = []
        for r in v:
            x = shape(r)
            X.append([x["M"] * x["L"], x["M"], x["L"], 1.0])
        cols = [lstsq(X, [1e3 * y for y in ys]) for ys in ([r["measured_s"] for r in v], [r["predicted_s"] for r in v],
                                                             [device[r["label"]] for r in v])]
        print("  h%-5d tp%d mbs%-2d   %6.2f %6.2f %6.2f   %6.2f %6.2f %6.2f" % (key + tuple(c[0] for c in cols) +
                                                                             tuple(c[1] for c in cols)))
    # How exactly the measured times follow the four terms, per configuration of one dp (the rows
    # that differ only in layers and global batch).
    worst, exact, linear, groups = 0.0, {}, 0, 0
    for r in rows:
        l = r["line"]
        if l["pp"] == 1:
            exact.setdefault((r["hidden"], l["tp"], l["gpus"], l["mbs"]), []).append(r)
    for v in exact.values():
        if len(v) >= 6:
            X = [[shape(r)["M"] * shape(r)["L"], shape(r)["M"], shape(r)["L"], 1.0] for r in v]
            c = lstsq(X, [1e3 * r["measured_s"] for r in v])
            err = max(abs(sum(a * b for a, b in zip(x, c)) / (1e3 * r["measured_s"]) - 1) for x, r in zip(X, v))
            worst, groups, linear = max(worst, err), groups + 1, linear + (err < 1e-5)
    print("  measured pp-1 rows against a·M·L + b·M + c·L + d per (hidden, tp, gpus, mbs): %d of %d configurations"
          " within 0.001%%, worst |residual| %.3f%%" % (linear, groups, 100 * worst))


def device_cluster(path, out):
    """The vTrain cluster with every host constant at 0: predict then gives the device's time alone."""
    c = json.load(open(path))
    c["name"] += "-device-only"
    c["dispatch_s"] = 0
    c.setdefault("frameworks", {})["megatron"] = {k: 0 for k in ("host_op_s", "host_backward_op_s", "host_collective_s",
                                                                "host_micro_batch_s")}
    with open(out, "w") as f:  # our own temporary folder
        json.dump(c, f)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--data", default=published_sets.DATA)
    ap.add_argument("--match", default="h8192")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sets = published_sets.Sets(tmp, a.data, "megatron", "fsdp")
        rows = sets.vtrain()
        res, _ = run_batch(a.bin, tmp, [r["line"] for r in rows])
        single = [r for r in rows if r["set"] == "vtrain-single"]
        dev_path = device_cluster(sets.vtrain_cluster, tmp + "/device-only.json")
        dev, _ = run_batch(a.bin, tmp, [dict(r["line"], cluster=dev_path) for r in single])
        device = {r["label"]: p["time"]["step_s"] for r, p in zip(single, dev) if "error" not in p}
    for r, p in zip(rows, res):
        if "error" not in p:
            r["predicted_s"], r["result"] = p["time"]["step_s"], p
    rows = [r for r in rows if "predicted_s" in r]
    multi = [r for r in rows if r["set"] == "vtrain-multi"]
    breakdown(multi, a.match)
    print()
    pairs(multi)
    print()
    scan(multi)
    print()
    tp8([r for r in rows if r["set"] == "vtrain-single"])
    print()
    split([r for r in rows if r["set"] == "vtrain-single"], device)


if __name__ == "__main__":
    sys.exit(main())
