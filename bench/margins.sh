#!/bin/sh
# bench/margins.sh — the margins of the suite's tolerance tests:
# each test reruns under every OpenBLAS kernel any x86-64 machine runs
# (OPENBLAS_CORETYPE = Prescott, Sandybridge, Haswell) and the machine's own
# (unset), and the worst error each comparison measured is set against its
# threshold: margin = threshold / worst (target >= 5).
#
#   sh bench/margins.sh PART...      run the parts named, in this order
#
# Parts (run them one at a time on a shared machine; the slow ones last):
#   cpu        build/tests: test_gemm, test_train, test_dialect, test_gradcheck
#   gpu        build-sim/tests/gpu (simulated devices): hostloss, dialect,
#              train, layers, engines (SDNN_SIM_DEVICES=4)
#   gradcheck  `scalednn gradcheck` on $GC_CFGS (default cfg/shapes-res.cfg,
#              cfg/shapes-v4tiny.cfg, tests/cfg/gradcheck-yolo-tiny.cfg,
#              tests/cfg/gradcheck-yolov2-tiny.cfg: a [region] head),
#              -engine cpu and (build-sim) -engine gpu
#   seeds      `scalednn gradcheck` for seeds 1-10 (-engine cpu) on
#              $SEEDS_CFG (default cfg/shapes-res.cfg, ~70 s a run here)
#   table      only print the table of what the log holds
#
# The tests report through SDNN_MARGIN_LOG (tests/margin.h): one line
# "NAME WORST THRESHOLD" per comparison; gradcheck's rows are read from its
# table (stage 1: median vs 1e-5, stage 2: worst error vs the error model's
# bound; the layer with the smallest margin per run). The log is
# $MARGINS_LOG (default bench/results/margins.log), lines prefixed with the
# kernel; the table gives, per test and kernel, the smallest margin.
# Environment: KERNELS (default "Prescott Sandybridge Haswell own"),
# GPU_PROGS (the gpu part's programs), B (default build), BS (default build-sim), DK (default ./darknet), SEEDS (default "1 2 ... 10").
# The tests never set OPENBLAS_CORETYPE themselves; only this script does.
# Results on simulated devices show the engine's host logic and the C
# kernels' arithmetic, never the CUDA kernels.
set -u
B=${B:-build}
BS=${BS:-build-sim}
DK=${DK:-./darknet}
KERNELS=${KERNELS:-"Prescott Sandybridge Haswell own"}
SEEDS=${SEEDS:-"1 2 3 4 5 6 7 8 9 10"}
SEEDS_CFG=${SEEDS_CFG:-cfg/shapes-res.cfg}
GC_CFGS=${GC_CFGS:-"cfg/shapes-res.cfg cfg/shapes-v4tiny.cfg tests/cfg/gradcheck-yolo-tiny.cfg tests/cfg/gradcheck-yolov2-tiny.cfg"}
LOG=${MARGINS_LOG:-bench/results/margins.log}
mkdir -p "$(dirname "$LOG")"
T=$(mktemp -d /tmp/sdnn-margins-XXXXXX)
trap 'rm -rf "$T"' EXIT

# run KERNEL CMD...: CMD under that kernel with a fresh margin log, whose
# lines go to $LOG prefixed with the kernel.
run() {
    k=$1
    shift
    : >"$T/m.log"
    if [ "$k" = own ]; then
        env -u OPENBLAS_CORETYPE SDNN_MARGIN_LOG="$T/m.log" "$@" >"$T/out.txt" 2>&1
    else
        env OPENBLAS_CORETYPE="$k" SDNN_MARGIN_LOG="$T/m.log" "$@" >"$T/out.txt" 2>&1
    fi
    rc=$?
    [ $rc -ne 0 ] && echo "margins: $k $*: exit $rc (its failures are in the table)" >&2
    sed "s/^/$k /" "$T/m.log" >>"$LOG"
    return 0
}

# gradcheck KERNEL NAME ARGS...: the smallest stage 1 and stage 2 margins of
# one `scalednn gradcheck` table.
gradcheck() {
    k=$1
    name=$2
    shift 2
    run "$k" "$@"
    grep -E '^ +[0-9]+  .*\| .*\| .*(ok|FAIL)$' "$T/out.txt" | awk -F'|' -v k="$k" -v n="$name" '
        { split($2, a, " "); split($3, b, " ");
          if (a[2] > 0 && (w1 == "" || a[1] / a[2] > w1 / t1)) { w1 = a[1]; t1 = a[2] }
          if (b[2] > 0 && (w2 == "" || b[1] / b[2] > w2 / t2)) { w2 = b[1]; t2 = b[2] } }
        END { if (w1 != "") { print k, n "/stage1", w1, t1; print k, n "/stage2", w2, t2 }
              else print k, n "/no-table", 1, 0 }' >>"$LOG"
}

for part in "$@"; do
    case $part in
    cpu)
        for k in $KERNELS; do
            for p in test_gemm test_train test_dialect test_gradcheck; do
                echo "margins: $k $p" >&2
                run "$k" "$B/tests/$p"
            done
        done ;;
    gpu)
        for k in $KERNELS; do
            for p in ${GPU_PROGS:-hostloss dialect train layers engines}; do
                echo "margins: $k gpu/$p (simulated devices)" >&2
                run "$k" env SDNN_SIM_DEVICES=4 "$BS/tests/gpu/$p"
            done
        done ;;
    gradcheck)
        for k in $KERNELS; do
            for cfg in $GC_CFGS; do
                echo "margins: $k gradcheck $cfg" >&2
                gradcheck "$k" "gradcheck:$cfg:cpu" "$DK" scalednn gradcheck "$cfg" \
                    -engine cpu -samples 2 -seed 1
                gradcheck "$k" "gradcheck:$cfg:gpu(simulated)" env SDNN_SIM_DEVICES=2 \
                    "$BS/darknet" scalednn gradcheck "$cfg" -engine gpu -samples 2 -seed 1
            done
        done ;;
    seeds)
        for k in $KERNELS; do
            for s in $SEEDS; do
                echo "margins: $k gradcheck seed $s" >&2
                gradcheck "$k" "gradcheck:$SEEDS_CFG:seed$s" "$DK" scalednn \
                    gradcheck "$SEEDS_CFG" -engine cpu -samples 2 -seed "$s"
            done
        done ;;
    table) ;;
    *)
        echo "usage: sh bench/margins.sh cpu|gpu|gradcheck|seeds|table ..." >&2
        exit 2 ;;
    esac
done

# The table: per test and kernel the smallest margin (threshold / worst),
# then per test the smallest over the kernels; "<5" marks a test below the
# target, "FAIL" one above its threshold.
[ -s "$LOG" ] || { echo "margins: $LOG is empty" >&2; exit 1; }
awk '
{ k = $1; w = $(NF-1) + 0; t = $NF + 0; name = $2
  for (i = 3; i <= NF - 2; ++i) name = name " " $i
  m = w > 0 ? t / w : 1e99
  key = name SUBSEP k
  if (!(key in M) || m < M[key]) { M[key] = m; W[key] = w; Th[key] = t }
  if (!(name in seen)) { seen[name] = 1; order[++n] = name }
  if (!(k in ks)) { ks[k] = 1; korder[++nk] = k } }
END {
  printf "%-60s", "test (worst error / threshold = margin per kernel)"
  for (j = 1; j <= nk; ++j) printf " | %-26s", korder[j]
  printf " | %s\n", "min margin"
  for (i = 1; i <= n; ++i) {
    nm = order[i]; low = 1e99
    printf "%-60s", substr(nm, 1, 60)
    for (j = 1; j <= nk; ++j) {
      key = nm SUBSEP korder[j]
      if (key in M) {
        printf " | %8.2e/%7.1e=%7.3g", W[key], Th[key], M[key]
        if (M[key] < low) low = M[key]
      } else printf " | %-26s", "-"
    }
    flag = low < 1 ? " FAIL" : low < 5 ? " <5" : ""
    printf " | %.3g%s\n", low, flag
  }
}' "$LOG"
