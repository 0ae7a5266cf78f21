#!/usr/bin/env bash
# cli_expect.sh CODE REGEX -- COMMAND...  — runs COMMAND (with a 120 s limit), passes when it exits
# with CODE and its stderr matches REGEX. Used by ctest for the command line's bad-input cases.
set -u
code=$1 regex=$2
shift 3
err=$(timeout 120 "$@" 2>&1 >/dev/null)
rc=$?
if [ "$rc" -ne "$code" ]; then
  echo "expected exit $code, got $rc; stderr: $err"
  exit 1
fi
if ! grep -qE -- "$regex" <<<"$err"; then
  echo "stderr does not match /$regex/: $err"
  exit 1
fi
echo "ok: exit $rc, $err"
