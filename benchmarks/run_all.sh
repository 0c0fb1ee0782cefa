#!/usr/bin/env bash
# The side-by-side benchmarks and the breakdown, one after another, each one's output in OUTDIR:
#
#     benchmarks/run_all.sh OUTDIR          (or: make bench, which writes to runs/bench)
#
# OUTDIR/NAME.txt per benchmark (its machine header, parity checks, paired timings), OUTDIR/breakdown.png
# (the figure of bench_breakdown.py) and OUTDIR/times.txt (how long each took). Every benchmark runs
# under `env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE`, so numpy's BLAS picks the kernel a user's numpy
# picks, with its defaults (15 pairs, the order rotated each round). PYTHON (default .venv/bin/python)
# runs them. The benchmarks of a fresh process's memory and the training runs (bench_long_attention,
# bench_train, bench_similar, bench_explore_page) are not here: they take longer; run them by hand, as
# bench_revisions, which compares the working tree with a revision you name (--base REV).
#
# Budget: about 15 minutes on a quiet 2-core machine (an estimate from the step times of earlier runs;
# times.txt gives the real ones). The two longest are bench_kvcache (15
# pairs of 512 generated tokens, each pair one cached and one recomputing run) and bench_minilm (six
# corpora and two query sets, 15 rounds each); the others take a minute or two each. bench_gpt2 joined after the
# 2026-12-01 run; its 15 pairs of 2.2 s and 2.5 s sides add about 80 s (an estimate). A busy machine
# takes longer: close other programs first, and keep the load average the headers print.
#
# QUICK=1 benchmarks/run_all.sh OUTDIR runs each with a smoke test's options instead (a few pairs, small
# sizes): it checks that the scripts run and their parity checks pass; its numbers are no measurement.
set -u

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: benchmarks/run_all.sh OUTDIR" >&2
    exit 2
fi
out=$1
if [ -L "$out" ]; then
    echo "run_all.sh: $out is a symbolic link; give a real directory" >&2
    exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$root/.venv/bin/python}
if [ ! -x "$py" ]; then
    echo "run_all.sh: no Python at $py (set PYTHON, or run make install-test)" >&2
    exit 2
fi
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
cd "$root" || exit 2

status=0
: > "$out/times.txt"
run() {
    local name=$1
    shift
    local start=$SECONDS
    echo "== $name: $*"
    rm -f "$out/$name.txt"
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$py" "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    echo "$name: $((SECONDS - start)) s, exit status $rc" | tee -a "$out/times.txt"
    if [ $rc -ne 0 ]; then
        echo "   FAILED: see $out/$name.txt" >&2
        status=1
    fi
}

if [ "${QUICK:-0}" = 1 ]; then
    echo "QUICK=1: smoke-test options, not a measurement"
    run transformer benchmarks/bench_transformer.py --pairs 2 --warmup 0
    run small benchmarks/bench_small.py --pairs 2 --warmup 1
    run parallel benchmarks/bench_parallel.py --pairs 1 --warmup 0 --reps 1
    run gelu benchmarks/bench_gelu.py --n 100000 --pairs 3
    run kvcache benchmarks/bench_kvcache.py --tokens 48 --pairs 3
    run minilm benchmarks/bench_minilm.py --pairs 2 --warmup 0 --batches 1 --lengths short,long --queries 2
    run gpt2 benchmarks/bench_gpt2.py --pairs 2 --warmup 0 --layers 2 --tokens 12
    rm -f "$out/breakdown.png"
    run breakdown benchmarks/bench_breakdown.py --pairs 1 --figure "$out/breakdown.png"
else
    run transformer benchmarks/bench_transformer.py
    run small benchmarks/bench_small.py
    run parallel benchmarks/bench_parallel.py
    run gelu benchmarks/bench_gelu.py
    run kvcache benchmarks/bench_kvcache.py
    run minilm benchmarks/bench_minilm.py
    run gpt2 benchmarks/bench_gpt2.py
    rm -f "$out/breakdown.png"
    run breakdown benchmarks/bench_breakdown.py --figure "$out/breakdown.png"
fi
echo "total: $SECONDS s" | tee -a "$out/times.txt"
exit $status
