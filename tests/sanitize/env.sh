# tests/sanitize/env.sh — sanitizer settings for the TRAINSCOPE_SANITIZE=ON build (build-asan), sourced
# by scripts/test --sanitize; source it too before running a test binary of that build by hand.
# Every report is fatal (abort_on_error, halt_on_error): a test that trips one fails, with the report
# in its output. Suppressions are in this folder, one file per sanitizer, each entry with its reason.
_ts_sanitize_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$_ts_sanitize_dir/ubsan.supp}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$_ts_sanitize_dir/lsan.supp:print_suppressions=0}
unset _ts_sanitize_dir
