#!/bin/sh
# tests/gpu/cli_bytes.sh — bytes on the wire and the configuration matrix of
# issue 24, through ./darknet detector train on simulated devices (make
# GPU=sim):
#
#   {1 process x 4 devices, 2 processes x 2 devices} x {none, fp16, bf16,
#   int8, topk} x {bucket_mb fixed, auto} x {backend nccl, auto}, engine=gpu,
#   each against the MPI path (backend=mpi, 2 x 2, the same codec, fixed
#   buckets):
#
#   - every cell trains (exit 0, a CSV with its steps);
#   - bytes each replica sends a step (the CSV's bytes_exchanged, collective.h's
#     one definition over W = 4 replicas in both layouts) are at most 0.55 x
#     none's for fp16/bf16, 0.3 x for int8, 0.05 x for topk (topk_ratio=0.01),
#     none's being the same layout, buckets and backend; and never above the
#     MPI path's for the same codec (relative slack 1e-4: rounding to a byte
#     per bucket, ring chunks of a few bytes apart; bucket_mb=auto cells
#     PART_SLACK, their plan's other partition, see below);
#   - fixed-bucket nccl cells: the simulated NCCL's own counter
#     (SDNN_SIM_NCCL_BYTES, plugin/cuda/sim/nccl.c: what passed through each
#     rank) summed over the 4 ranks / 4 equals the CSV's bytes summed over the
#     steps (relative 1e-4: a counter or a report off by W, 2 or a codec's
#     ratio is off by 25% or more); the progress line's "MB exchanged" is the
#     CSV's figure / 1e6 (to its 2 printed decimals), and the timeline's
#     "bytes exchanged" counter (rank 0's trace) is the CSV's, step by step;
#   - losses: the mean loss over the first FIXED_ITERS iterations is finite
#     and within LOSS_TOL (relative) of the MPI path's for the same codec.  Error model: two runs
#     of one command differ by ~10% per iteration because Darknet's loader
#     draws its augmentations in its threads (cli_nccl.sh); over 2-3 steps
#     the codecs' own errors on the gradient (fp16 2^-11, bf16 2^-8, int8
#     1/254 of a chunk's max, relative; topk's dropped mass carried by error
#     feedback) move the loss by far less than that noise, so the bound is the
#     loader's: the first step's loss (before any exchange) of one command
#     spread 45.6-55.5 over 4 runs, so the mean of 2 steps of two runs
#     differs by ~10% (one sd); 0.4 is 4 sd.  Over 2 steps this holds the
#     runs finite and in the MPI path's range, not a codec's accuracy.  The codecs' own tolerances are held on fixed inputs by
#     tests/test_collective.c and tests/gpu/codecs.c.
#
# A failing cell is named with its layout, codec, buckets and backend.  On
# simulated devices the NCCL is sim/nccl.c's: the host logic, ordering and
# arithmetic, never real NCCL or its timing.  Exits with the failed count.
set -u
B=${1:-build-sim}
LOSS_TOL=0.4
NAME=cli_bytes NIMG=32
. tests/gpu/cli_common.sh

if ! command -v mpirun >/dev/null 2>&1; then
    say "not checked: no mpirun here for 2 processes x 2 simulated devices"
    exit 0
fi
CODECS="none fp16 bf16 int8 topk"
LAYOUTS="1x4 2x2" BUCKETS="fixed auto" BACKENDS="nccl auto"
# Under ASan (SLOW > 1, tests/gpu/run_sim.sh) the memory checks need the
# paths, not every cell: both layouts, fixed buckets on nccl, three codecs
# (9 runs instead of 45); the plain suite runs the whole matrix.
if [ "${SLOW:-1}" -gt 1 ]; then
    CODECS="none fp16 topk" BUCKETS=fixed BACKENDS=nccl
    say "under ASan: the matrix's nccl fixed-bucket cells for $CODECS (the whole matrix runs in the plain suite)"
fi
# bucket_mb=auto against the MPI path's fixed 0.25 MiB buckets: the plan cuts
# the net into other (here more) buckets, and each bucket rounds on its own
# (int8: a 4-byte scale per started chunk of int8_chunk values of every
# packed tensor, topk: k rounded up), which adds bytes whatever carries them:
# 0.12% (int8, 8 buckets against 3) and 0.09% (topk) on this net.  The slack
# is for that partition only; a collective that sends more (fp32 for fp16,
# an all-gather where the MPI path rings) is 25% or more above.
PART_SLACK=0.005
# 2 steps of a world of 4 (an iteration is a batch per replica); auto
# plans after its 2nd step, so it runs a 3rd on the plan.
FIXED_ITERS=8
AUTO_ITERS=12

# cfg TAG BACKEND CODEC BUCKETS: the shapes cfg at 32x32, engine=gpu.
cfg() {
    sed -e "s/^backend=local/backend=$2/" -e "s/^compress=none/compress=$3/" \
        -e 's/^width=64/width=32/' -e 's/^height=64/height=32/' \
        cfg/shapes-scalednn.cfg >"$W/$1.cfg"
    [ "$4" = auto ] && sed -i '/^bucket_mb=/d' "$W/$1.cfg"
    printf 'engine=gpu\nprofile_iters=1\n' >>"$W/$1.cfg"
    [ "$3" = topk ] && echo "topk_ratio=0.01" >>"$W/$1.cfg"
    return 0
}

# train TAG NPROC ITERS: 1 process x 4 devices or 2 x 2, with the NCCL counter.
train() {
    rm -f "$W/$1.bytes" "$W/$1.csv"
    if [ "$2" = 1 ]; then
        (cd "$W" && SDNN_SIM_NCCL_BYTES="$W/$1.bytes" SDNN_SIM_DEVICES=4 timeout 300 "$BIN" \
            detector train s.data "$1.cfg" -gpus 0,1,2,3 -max_batches "$3" -seed 1 \
            -csv "$1.csv") >"$W/$1.log" 2>&1
    else
        (cd "$W" && SDNN_SIM_NCCL_BYTES="$W/$1.bytes" SDNN_MPI_RUN_TIMEOUT=300 \
            sh "$ROOT/tests/mpi/run.sh" 2 "$BIN" detector train s.data "$1.cfg" -gpus 0,1 \
            -max_batches "$3" -seed 1 -csv "$1.csv") >"$W/$1.log" 2>&1
    fi
}

# Per CSV: the last step's bytes, the sum over steps, the mean loss.
last_bytes() { awk -F, '/^[0-9]/ { b = $9 } END { print b + 0 }' "$1"; }
sum_bytes() { awk -F, '/^[0-9]/ { s += $9 } END { printf "%.0f", s }' "$1"; }
# mean_loss CSV: over the iterations every run has (the first FIXED_ITERS).
mean_loss() {
    awk -F, -v m="$FIXED_ITERS" '/^[0-9]/ && $1 + 0 <= m { s += $3; n++ }
        END { if (n) printf "%.6f", s / n; else print "none" }' "$1"
}
counted() { awk '/^sim-nccl-bytes/ { s += $6; n++ } END { printf "%.0f %d", s, n }' "$1"; }
# le A B SLACK: A <= B x (1 + SLACK).
le() { awk -v a="$1" -v b="$2" -v s="$3" 'BEGIN { exit !(a <= b * (1 + s)) }'; }
near() {
    awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(b > 0 && d <= t * b) }'
}
finite_near() {
    [ "$1" != none ] && [ "$2" != none ] && awk -v g="$1" -v c="$2" -v t="$LOSS_TOL" \
        'BEGIN { if (g != g + 0 || g == "nan" || g == "-nan") exit 1; d = g - c; if (d < 0) d = -d;
                 exit !(c > 0 && d <= t * c) }'
}
bound_of() {
    case $1 in fp16 | bf16) echo 0.55 ;; int8) echo 0.3 ;; topk) echo 0.05 ;; *) echo 1 ;; esac
}
mb() { awk -v b="$1" 'BEGIN { printf "%.4f", b / 1e6 }'; }

# ---- the MPI path: backend=mpi, 2 x 2, fixed buckets, every codec -------------------
for c in $CODECS; do
    tag=ref-$c
    cfg "$tag" mpi "$c" fixed
    train "$tag" 2 "$FIXED_ITERS"
    rc=$?
    if [ $rc -ne 0 ] || [ ! -s "$W/$tag.csv" ]; then
        tail -n 5 "$W/$tag.log"
        bad "MPI path $c (2x2, backend=mpi, fixed buckets) exited $rc ($W/$tag.log)"
    fi
done

# ---- the matrix ------------------------------------------------------------------------
cells=0
for lay in $LAYOUTS; do
    np=1
    [ "$lay" = 2x2 ] && np=2
    for bk in $BUCKETS; do
        iters=$FIXED_ITERS
        [ "$bk" = auto ] && iters=$AUTO_ITERS
        for be in $BACKENDS; do
            for c in $CODECS; do
                tag=$lay-$bk-$be-$c
                cell="cell $lay $c bucket_mb=$bk backend=$be"
                cells=$((cells + 1))
                cfg "$tag" "$be" "$c" "$bk"
                [ "$bk" = fixed ] && [ "$be" = nccl ] && echo "timeline=$W/$tag.json" >>"$W/$tag.cfg"
                train "$tag" "$np" "$iters"
                rc=$?
                if [ $rc -ne 0 ] || [ ! -s "$W/$tag.csv" ]; then
                    tail -n 5 "$W/$tag.log"
                    bad "$cell: exited $rc ($W/$tag.log)"
                    continue
                fi
                by=$(last_bytes "$W/$tag.csv")
                msg="$(mb "$by") MB a step"
                ok=1
                if [ "$c" != none ] && [ -s "$W/$lay-$bk-$be-none.csv" ]; then
                    none=$(last_bytes "$W/$lay-$bk-$be-none.csv")
                    lim=$(bound_of "$c")
                    if le "$by" "$(awk -v n="$none" -v l="$lim" 'BEGIN { print n * l }')" 0; then
                        msg="$msg, $(awk -v a="$by" -v n="$none" 'BEGIN { printf "%.3f", a / n }') x none's (<= $lim)"
                    else
                        bad "$cell: $(mb "$by") MB a step, none's $(mb "$none") MB: ratio above $lim" \
                            "(on nccl fp16/bf16 still coded, or a collective that costs more: step 3 of issue 24)"
                        ok=0
                    fi
                fi
                if [ -s "$W/ref-$c.csv" ]; then
                    ref=$(last_bytes "$W/ref-$c.csv")
                    slack=1e-4
                    [ "$bk" = auto ] && slack=$PART_SLACK
                    if ! le "$by" "$ref" "$slack"; then
                        bad "$cell: $(mb "$by") MB a step, above the MPI path's $(mb "$ref") MB for $c"
                        ok=0
                    fi
                    ml=$(mean_loss "$W/$tag.csv")
                    mr=$(mean_loss "$W/ref-$c.csv")
                    if finite_near "$ml" "$mr"; then
                        msg="$msg, mean loss $ml (MPI path $mr)"
                    else
                        bad "$cell: mean loss $ml, the MPI path's $mr (tolerance $LOSS_TOL relative)"
                        ok=0
                    fi
                fi
                if [ "$bk" = fixed ] && [ "$be" = nccl ]; then
                    set -- $(counted "$W/$tag.bytes" 2>/dev/null || echo "0 0")
                    sum=$(sum_bytes "$W/$tag.csv")
                    if [ "$2" != 4 ]; then
                        bad "$cell: the simulated NCCL's counter has $2 ranks, not 4 ($W/$tag.bytes)"
                        ok=0
                    elif near "$(awk -v s="$1" 'BEGIN { print s / 4 }')" "$sum" 1e-4; then
                        msg="$msg, = the NCCL counter's $1 / 4 bytes"
                    else
                        bad "$cell: CSV bytes over the run $sum, the simulated NCCL counted $1 over 4 ranks" \
                            "($(awk -v s="$1" -v c="$sum" 'BEGIN { printf "%.4f", s / 4 / c }') x)"
                        ok=0
                    fi
                    tl=$(grep -o '"bytes exchanged"[^}]*}' "$W/$tag.json" 2>/dev/null |
                        sed -n 's/.*"bytes":\([0-9]*\).*/\1/p' | tr '\n' ' ')
                    csvs=$(awk -F, '/^[0-9]/ { printf "%s ", $9 }' "$W/$tag.csv")
                    if [ "$tl" != "$csvs" ]; then
                        bad "$cell: the timeline's bytes counter says '$tl', the CSV '$csvs'"
                        ok=0
                    fi
                    prog=$(sed -n 's/.* \([0-9.]*\) MB exchanged.*/\1/p' "$W/$tag.log" | tail -n 1)
                    if [ -n "$prog" ] && awk -v p="$prog" -v b="$by" \
                        'BEGIN { d = p - b / 1e6; if (d < 0) d = -d; exit !(d <= 0.005) }'; then :; else
                        bad "$cell: the progress line says '$prog MB exchanged', the CSV $(mb "$by") MB"
                        ok=0
                    fi
                fi
                [ $ok = 1 ] && say "ok $cell: $msg"
            done
        done
    done
done
say "$cells cells, $failed failed"
[ "$failed" -eq 0 ] && rm -rf "$W"
exit "$failed"
