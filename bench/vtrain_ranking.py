#!/usr/bin/env python3
"""vtrain_ranking.py — what bounds the within-group Spearman of `trainscope predict` on vTrain's
multi-node Megatron-LM runs, and where vTrain's one-node TP 8 rows lose their time (issue 33; the
row-by-row residuals are bench/vtrain_residuals.py's).

  ties        per group: the discordant pairs (measured order against predicted order), how many of
              them are near-ties (measured within 3 %, 3-10 %, over 10 %), and the Spearman once each
              measured time may move by up to ±1/2/3/5 % toward the model's (group-scaled) value: how
              much of the shortfall measurement noise of that size could hold.
  oracles     upper bounds on what a class of term could do: the predictions multiplied by one free
              factor per (group, TP), per (group, TP, PP) layout, or per (group, micro-batch), each
              factor the geometric mean of measured / predicted over its rows — the best any term that
              depends only on that key could reach (it is fitted to the rows: a bound, not a model).
  layouts     measured / predicted per (group, tp, pp, dp), and row by row over the micro-batch.
  placement   Megatron-LM's rank order (tp fastest, then dp, then pp): per row, how many of a node's
              8 GPUs cross a pipeline boundary at once and how many DP members each node holds; the
              node's DP and pipeline bytes through its NICs for the pairs of equal work.
  dpshared    a test, not a term: the DP all-reduce of groups with k >= 2 members per node (TP < 8)
              taken F times longer on vTrain's multi-node rows (h3072's misses are a per-step constant
              of that size: 0.4-0.7 s at TP 1-4, ~0.05 s at TP 8-16), with the same F on Narayanan's
              Table 1 rows whose DP groups hold 2-8 members per node (Megatron-LM's same reduction
              after the backward, on 8 NICs a node).
  tp8fit      vtrain-single, dp 1 and pp 1: least squares t = a·M·L + b·M + c per (tp, mbs, hidden)
              — the cost per layer and micro-batch, per micro-batch and per step, measured and model.

usage: bench/vtrain_ranking.py [--bin build/bin/trainscope]
"""
import argparse
import math
import sys
import tempfile

import published_sets
from common import DEFAULT_BIN
from predict_vs_published import median, run_batch, spearman
from vtrain_residuals import shape

NODE = 8        # GPUs per node (vTrain's node_size)
NODE_BW = 100e9  # vTrain's 800 Gb/s per node between nodes


def groups(rows):
    g = {}
    for r in rows:
        g.setdefault(r["group"], []).append(r)
    return dict(sorted(g.items(), key=lambda kv: int(kv[0][1:].split()[0])))


def banded_spearman(rows, pred, band):
    """Per group: Spearman(measured', pred), measured' = the measured time moved by at most `band`
    (a fraction) toward c·pred, c the group's median measured / predicted."""
    out = {}
    for g, v in groups(rows).items():
        m = [r["measured_s"] for r in v]
        p = [pred(r) for r in v]
        c = math.exp(median([math.log(a / b) for a, b in zip(m, p)]))
        moved = [min(max(c * b, a * (1 - band)), a * (1 + band)) for a, b in zip(m, p)]
        out[g] = spearman(moved, p)
    return out


def line(name, sp):
    return "  %-48s %s -> %.3f" % (name, " ".join("%.2f" % v for v in sp.values()), median(list(sp.values())))


def ties(rows):
    print("near-ties (groups h3072 h6144 h8192 h12288; Spearman per group -> median):")
    base = lambda r: r["predicted_s"]
    for band in (0.0, 0.01, 0.02, 0.03, 0.05):
        print(line("measured moved <= %g %% toward the model" % (100 * band), banded_spearman(rows, base, band)))
    for g, v in groups(rows).items():
        d = []
        for i in range(len(v)):
            for j in range(i + 1, len(v)):
                a, b = v[i], v[j]
                if (a["measured_s"] - b["measured_s"]) * (a["predicted_s"] - b["predicted_s"]) < 0:
                    d.append(abs(a["measured_s"] / b["measured_s"] - 1))
        n = len(v) * (len(v) - 1) // 2
        print("  %-26s %2d rows, %4d pairs, %3d discordant: %3d within 3 %%, %3d at 3-10 %%, %3d over 10 %%" % (
            g, len(v), n, len(d), sum(x <= 0.03 for x in d), sum(0.03 < x <= 0.10 for x in d), sum(x > 0.10 for x in d)))


def oracle(rows, key):
    logs = {}
    for r in rows:
        logs.setdefault(key(r), []).append(math.log(r["measured_s"] / r["predicted_s"]))
    f = {k: math.exp(sum(v) / len(v)) for k, v in logs.items()}
    return lambda r: r["predicted_s"] * f[key(r)]


def oracles(rows):
    print("oracles: one free factor per key, fitted to the rows (an upper bound for a term of that key):")
    base = lambda r: r["predicted_s"]
    print(line("shipped", banded_spearman(rows, base, 0)))
    for name, key in (("per (group, tp)", lambda r: (r["group"], r["line"]["tp"])),
                      ("per (group, tp, pp) layout", lambda r: (r["group"], r["line"]["tp"], r["line"]["pp"])),
                      ("per (group, mbs)", lambda r: (r["group"], r["line"]["mbs"])),
                      ("per (group, micro-batch count M)", lambda r: (r["group"], shape(r)["M"]))):
        print(line(name, banded_spearman(rows, oracle(rows, key), 0)))


def layouts(rows):
    print("measured / predicted per layout (geometric mean), then per micro-batch (mbs:error %):")
    by = {}
    for r in rows:
        x = shape(r)
        by.setdefault((x["h"], x["tp"], x["pp"], x["dp"]), []).append(r)
    for k in sorted(by):
        v = sorted(by[k], key=lambda r: r["line"]["mbs"])
        f = math.exp(sum(math.log(r["measured_s"] / r["predicted_s"]) for r in v) / len(v))
        print("  h%-5d tp%-2d pp%-2d dp%-2d %+6.1f %%   %s" % (k + (100 * (f - 1), " ".join(
            "%d:%+.0f" % (r["line"]["mbs"], 100 * (r["measured_s"] / r["predicted_s"] - 1)) for r in v))))
    # The model is smooth in the micro-batch; a run-to-run effect (where the job landed) is not.
    jumps = {}
    for (h, tp, pp, dp), v in by.items():
        v = sorted(v, key=lambda r: r["line"]["mbs"])
        e = [math.log(r["measured_s"] / r["predicted_s"]) for r in v]
        jumps.setdefault(h, []).extend(abs(e[i + 1] - e[i]) for i in range(len(e) - 1))
    for h in sorted(jumps):
        j = sorted(jumps[h])
        if j:
            print("  h%-5d measured/predicted between neighbouring micro-batches of one layout: median %.1f %%, "
                  "over 10 %% in %d of %d, largest %.0f %%" % (h, 100 * median(j), sum(x > 0.1 for x in j), len(j), 100 * j[-1]))


def placement(rows):
    """Megatron-LM's initialize_model_parallel order (tp, then dp, then pp): a stage is a block of
    tp·dp consecutive ranks; a DP group's members are tp apart."""
    blocks = sorted({r["line"]["tp"] * shape(r)["dp"] for r in rows})
    crossing = sorted({min(NODE, r["line"]["tp"] * shape(r)["dp"]) for r in rows if r["line"]["pp"] > 1})
    print("placement: stage blocks of tp*dp = %s ranks; GPUs of a node crossing a pipeline boundary at once: %s"
          % (blocks, crossing))
    print("  (every node's 8 GPUs send at every boundary at once, each 1/8 of the node's %.0f GB/s: the model's"
          " per-GPU share, so the NICs' sharing prices every row alike)" % (NODE_BW / 1e9))
    print("  pairs of equal work (same group, pp, M, mbs/tp): per node, DP ring egress 2·S·(n-1)/n per group x"
          " groups per node, and pipeline bytes per boundary crossing")
    seen = {}
    for r in rows:
        x = shape(r)
        seen.setdefault((r["group"], x["pp"], x["M"], x["mbs"] / x["tp"]), []).append(r)
    for key, v in sorted(seen.items()):
        if len(v) < 2:
            continue
        cells = []
        for r in sorted(v, key=lambda r: r["line"]["tp"]):
            x = shape(r)
            S = 2.0 * x["params"]                       # fp16 gradients of stage 0 per rank
            per_node = min(NODE // x["tp"], x["dp"]) if x["tp"] <= NODE else 1
            groups_per_node = NODE // per_node if x["tp"] <= NODE else NODE
            egress = groups_per_node * 2 * S * (x["dp"] - 1) / x["dp"]
            sends = NODE * x["act"] / x["tp"]         # one boundary, one micro-batch, scatter-gather
            cells.append("tp%d dp%d: DP %.1f GB, sends %.0f MB, measured %.2f s" % (
                x["tp"], x["dp"], egress / 1e9, sends / 1e6, r["measured_s"]))
        print("  %-26s pp%-2d M%-3d  %s" % (key[0], key[1], key[2], " | ".join(cells)))


def k_per_node(tp, dp):
    return max(1, min(dp, NODE // tp)) if tp <= NODE else 1


def dpshared(rows, published):
    print("dpshared: DP all-reduce x F where a group has k >= 2 members per node and spans nodes (a test, not a term)")
    def slowed(r, F):
        l = r["line"]
        dp = l["gpus"] // (l["tp"] * l["pp"])
        return r["predicted_s"] + ((F - 1) * r["dp_comm_s"] if k_per_node(l["tp"], dp) >= 2 and l["gpus"] > NODE else 0.0)
    for F in (1, 2, 3, 4, 5, 6):
        errs = [slowed(r, F) / r["measured_s"] - 1 for r in rows]
        t1 = ["%s %+.1f%%" % (r["label"], 100 * (slowed(r, F) / r["measured_s"] - 1)) for r in published
              if r["set"] == "table1" and slowed(r, F) != r["predicted_s"]]
        print(line("F %d: MAPE %.1f%%, median %+.1f%%;" % (F, 100 * sum(map(abs, errs)) / len(errs), 100 * median(errs)),
                   banded_spearman(rows, lambda r: slowed(r, F), 0)) + "   Table 1: " + ", ".join(t1))


def solve3(rows_xy):
    """Least squares for y = a·x0 + b·x1 + c·x2 (normal equations, 3x3, Gaussian elimination)."""
    A = [[sum(x[i] * x[j] for x, _ in rows_xy) for j in range(3)] for i in range(3)]
    b = [sum(x[i] * y for x, y in rows_xy) for i in range(3)]
    for i in range(3):
        p = max(range(i, 3), key=lambda k: abs(A[k][i]))
        A[i], A[p], b[i], b[p] = A[p], A[i], b[p], b[i]
        for k in range(i + 1, 3):
            f = A[k][i] / A[i][i]
            A[k] = [a - f * c for a, c in zip(A[k], A[i])]
            b[k] -= f * b[i]
    if min(abs(A[i][i]) for i in range(3)) < 1e-9 * max(abs(A[0][0]), 1.0):
        return None  # the rows do not separate the three costs (one M or one L throughout)
    out = [0.0] * 3
    for i in (2, 1, 0):
        out[i] = (b[i] - sum(A[i][j] * out[j] for j in range(i + 1, 3))) / A[i][i]
    return out


def tp8fit(rows):
    print("vtrain-single, dp 1 pp 1: t = a*M*L + b*M + c (ms), measured | model; a = per layer and micro-batch")
    by = {}
    for r in rows:
        l = r["line"]
        if l["pp"] != 1 or l["gpus"] != l["tp"] or l["tp"] < 2:
            continue
        x = shape(r)
        by.setdefault((l["tp"], l["mbs"], x["h"]), []).append(((x["M"] * x["L"], x["M"], 1.0), r))
    for k in sorted(by, key=lambda k: (k[1], k[2], k[0])):
        v = by[k]
        am = solve3([(x, 1000 * r["measured_s"]) for x, r in v])
        ap = solve3([(x, 1000 * r["predicted_s"]) for x, r in v])
        if len(v) < 4 or am is None or ap is None:
            continue
        print("  mbs%d h%-4d tp%d (%2d rows): a %5.2f | %5.2f   b %5.2f | %5.2f   c %5.1f | %5.1f" % (
            k[1], k[2], k[0], len(v), am[0], ap[0], am[1], ap[1], am[2], ap[2]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=DEFAULT_BIN)
    ap.add_argument("--data", default=published_sets.DATA)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sets = published_sets.Sets(tmp, a.data, "megatron", "fsdp")
        rows, published = sets.vtrain(), sets.published()
        res, _ = run_batch(a.bin, tmp, [r["line"] for r in rows + published])
    for r, p in zip(rows + published, res):
        if "error" not in p:
            r["predicted_s"], r["dp_comm_s"] = p["time"]["step_s"], p["time"]["dp_comm_s"]
    rows = [r for r in rows if "predicted_s" in r]
    multi = [r for r in rows if r["set"] == "vtrain-multi"]
    for section in (ties, oracles, layouts, placement):
        section(multi)
        print()
    dpshared(multi, [r for r in published if "predicted_s" in r])
    print()
    tp8fit([r for r in rows if r["set"] == "vtrain-single"])


if __name__ == "__main__":
    sys.exit(main())
