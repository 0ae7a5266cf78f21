#!/usr/bin/env bash
# export_notes_test.sh TRAINSCOPE DIR — what `export --format X` says it predicts for X's framework
# (issue 33) on a GPU study of the ranked space (tune --max-trials 0: no trial, well under a second):
#   * the tune names the id of its models' pick and the export that takes it (a --max-trials 0 study
#     holds no recommendation);
#   * Accelerate / TrainingArguments files run ZeRO-1 as DDP (their note says so): the note prices
#     that DDP, `predict --framework fsdp --zero 0`'s time, and calls it DDP, not FSDP;
#   * torchtitan (FSDP2, priced under the fsdp profile as `tune --runner torchtitan` ranks it) gets
#     the same note; before, it had none.
set -euo pipefail
ts=$1 dir=$2
mkdir -p "$dir"
study=$dir/export-notes.db
rm -rf "$study" "$study"-wal "$study"-shm "$study".trials
space=(--workload gpt2-355m --cluster h100-80gb-x8 --gbs 64)
out=$("$ts" tune "${space[@]}" --max-trials 0 --zero 1 --mbs 8 --ckpt none --study "$study")
grep -q "predicted fastest: dp8 tp1 pp1 mbs8 ga1 none bf16 adamw zero1 (--max-trials 0: no trial ran; export it with trainscope export .*export-notes.db --format FORMAT --trial 0)" <<<"$out" \
  || { echo "tune did not name the pick's id: $out"; exit 1; }
ddp=$("$ts" predict "${space[@]}" --mbs 8 --framework fsdp --zero 0 --json |
  python3 -c 'import json, sys; print("%.4g" % json.load(sys.stdin)["time"]["step_s"])')
for format in accelerate accelerate-config training-args torchtitan; do
  note=$("$ts" export "$study" --format "$format" --trial 0 2>&1 >/dev/null)
  want="note: predicted on h100-80gb-x8: PyTorch DDP $ddp s/step"
  grep -qF -- "$want" <<<"$note" || { echo "--format $format: no '$want' in: $note"; exit 1; }
  ! grep -q "PyTorch FSDP" <<<"$note" || { echo "--format $format priced a DDP file as FSDP: $note"; exit 1; }
done
echo "ok: accelerate, accelerate-config, training-args and torchtitan exports of a ZeRO-1 pick price the file's DDP at $ddp s/step"
