#!/bin/sh
# bench/fork/compare_cmds.sh [FORK_CLI]
#
# The detector commands side by side with the maintained fork's: the same
# data, cfg and weights through ./darknet and the fork's CLI (FORK_CLI, or the first
# argument: the `fork cli:` that bench/fork/build.sh prints), every number compared within a
# stated tolerance. Nothing of the fork's enters the repository; its binary only runs.
#
#   set      gen-shapes WORK/set -n 1024 -valid 64 -seed 1 -style plain (64x64 images), the
#            labels also copied beside the images, where the fork reads them (x.png -> x.txt);
#            paths relative to WORK, so both read the same lists
#   weights  cfg/shapes-plain.cfg, max_batches=ITERS, trained here (one replica, -seed 1)
#   calc_anchors DATA -num_of_clusters 6 -width W -height W, W = 64 and 32: ours once (it is
#            deterministic), the fork RUNS times with time() fixed to 1..RUNS (fixtime.so,
#            LD_PRELOAD: the fork seeds rand() from the clock, so each run is reproducible)
#   map      -points 0|11|101 x -iou_thresh 0.5|0.75, the mAP and TP/FP/FN at -thresh 0.25
#   valid    the per-class result files, line by line (image, probability, corners)
#   recall   truths found, proposals per image, mean best IoU
#
# Tolerances (error model): both run the same float32 network but sum in other orders
# (libdarknet's gemm vs OpenBLAS) and the fork folds batch norm into the weights, so each
# output differs by rounding only. A K-term float dot product is off by at most K*u of its
# magnitude sum (u = 2^-24); along the deepest path of cfg/shapes-plain.cfg (conv K = 27, 72,
# 144, 288, 576, 128, 64, 864, 48) that is 2211*u = 1.3e-4 relative, on logits of magnitude
# <= 15: 2e-3 on a logit. A probability is the product of two logistics (derivative <= 1/4
# each): TOL_P = 1e-3. A box corner in pixels moves by the centre (16 px cells: 16*2e-3/4 =
# 8e-3) plus half the size (w = anchor*exp(t) <= 30 px: 30*2e-3/2 = 0.03): TOL_BOX = 0.1 px.
# A detection whose probability is within TOL_P of the threshold (0.001) may be in one
# file only; it is counted as "at the threshold". So may a box whose IoU with a better one of
# its image is within TOL_IOU = 0.01 of the NMS threshold 0.6 (a corner moved by TOL_BOX moves
# the IoU of boxes of 10 px or more by at most 0.1/10): "at the NMS IoU". Any other line of one
# file only is a difference.
# mAP: TOL_MAP = 1e-3 (a swap of two detections within 2*TOL_P in rank moves one class's AP
# by at most 1/truths of that class; none is expected on a set whose scores are this far
# apart, each miss is printed). calc_anchors: k-means stops in a local optimum that depends
# on its start; ours must lie within the fork's runs' range of mean IoU (widened by the
# fork's float sum of n IoUs, n*u = 1e-4), and where a fork run ends at the same mean IoU
# (within 1e-4) its anchors must equal ours: exactly after the fork's truncation (int) at
# 64, within 1e-3 px at 32 (4 decimals printed, float means).
#
# Env: FORK_COMMIT (printed: the `fork commit:` of build.sh), WORK (a new mktemp -d), ITERS (600), RUNS (8), TOL_MAP, TOL_P, TOL_BOX, TOL_IOU.
# Exit 1 on any difference beyond the tolerances (each printed), 2 on bad usage.
set -eu
REPO=$(cd "$(dirname "$0")/../.." && pwd)
FORK=${1:-${FORK_CLI:-}}
if [ -z "$FORK" ] || [ ! -x "$FORK" ]; then
    echo "usage: sh bench/fork/compare_cmds.sh FORK_CLI (or FORK_CLI=...): the fork's darknet" >&2
    echo "       binary, built by sh bench/fork/build.sh SOURCE (its 'fork cli:' line)" >&2
    exit 2
fi
FORK=$(cd "$(dirname "$FORK")" && pwd)/$(basename "$FORK")
ITERS=${ITERS:-600}
RUNS=${RUNS:-8}
TOL_MAP=${TOL_MAP:-0.001}
TOL_P=${TOL_P:-0.001}
TOL_BOX=${TOL_BOX:-0.1}
TOL_IOU=${TOL_IOU:-0.01}
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
WORK=$(cd "$WORK" && pwd)
make -s -C "$REPO" -j2 darknet > "$WORK/make.out" 2>&1 || { cat "$WORK/make.out"; exit 1; }
OURS=$REPO/darknet
cc -shared -fPIC -O2 -o "$WORK/fixtime.so" "$REPO/bench/fork/fixtime.c"
cd "$WORK"
fail=0
bad() { echo "DIFF: $*"; fail=1; }

if [ ! -f set/valid.txt ]; then
    "$OURS" scalednn gen-shapes set -n 1024 -valid 64 -seed 1 -style plain > gen.out
    for s in train valid; do
        for f in set/labels/$s/*.txt; do cp "$f" set/images/$s/; done
    done
fi
printf 'classes=4\ntrain=set/train.txt\nvalid=set/valid.txt\nnames=set/shapes.names\nbackup=backup/\nresults=results\n' > s.data
sed "s/^max_batches *=.*/max_batches=$ITERS/" "$REPO/cfg/shapes-plain.cfg" > net.cfg
W=backup/net_final.weights
if [ ! -f "$W" ]; then
    mkdir -p backup
    echo "training $ITERS iterations (ours, one replica, seed 1) ..."
    "$OURS" detector train s.data net.cfg -seed 1 > train.log 2>&1 || { tail -5 train.log; exit 1; }
fi
nocol() { sed 's/\x1b\[[0-9;]*m//g'; }
echo "fork: $FORK${FORK_COMMIT:+ (commit $FORK_COMMIT)}"
echo "work: $WORK, weights $W ($ITERS iterations)"

# ---- calc_anchors -----------------------------------------------------------------
echo
echo "== calc_anchors -num_of_clusters 6 (ours: area-quantile start; fork: $RUNS seeded starts)"
for S in 64 32; do
    "$OURS" detector calc_anchors s.data -num_of_clusters 6 -width $S -height $S > "ours-anchors-$S.out"
    oi=$(sed -n 's/^mean IoU = \([0-9.]*\).*/\1/p' "ours-anchors-$S.out")
    oa=$(sed -n 's/^anchors = //p' "ours-anchors-$S.out")
    ou=$(sed -n 's/^anchors (unrounded) = //p' "ours-anchors-$S.out")
    : > "fork-anchors-$S.txt"
    r=1
    while [ $r -le "$RUNS" ]; do
        # It writes anchors.txt and counters_per_class.txt into the current folder (WORK).
        FIXTIME=$r LD_PRELOAD="$WORK/fixtime.so" "$FORK" detector calc_anchors \
            s.data -num_of_clusters 6 -width $S -height $S -dont_show -nocolor 2>&1 | nocol \
            > "fork-anchors-$S-$r.out"
        fi_=$(sed -n 's/.*avg IoU=\([0-9.]*\)%.*/\1/p' "fork-anchors-$S-$r.out" | awk '{ printf "%.6f", $1 / 100 }')
        [ -n "$fi_" ] && [ -f anchors.txt ] || { bad "fork calc_anchors -width $S run $r: no result"; r=$((r + 1)); continue; }
        fa=$(tr -d ' ' < anchors.txt)
        rm -f anchors.txt
        echo "$r $fi_ $fa" >> "fork-anchors-$S.txt"
        r=$((r + 1))
    done
    echo "-width $S: ours mean IoU $oi, anchors $oa ($ou)"
    awk -v oi="$oi" -v ou="$ou" -v S="$S" '
        BEGIN { no = split(ou, o, /, *|,/) }   # w1 h1 w2 h2 ...
        { n++; iou[n] = $2; a[n] = $3; if (n == 1 || $2 < lo) lo = $2; if (n == 1 || $2 > hi) hi = $2 }
        END {
            same = 0; worst = 0
            for (i = 1; i <= n; i++) {
                d = iou[i] - oi; if (d < 0) d = -d
                if (d > 1e-4) continue
                same++
                m = split(a[i], f, ",")
                k = no
                for (j = 1; j <= no; j++) ow[j] = o[j]
                if (m != k) worst = 1e9
                for (j = 1; j <= m && j <= k; j++) {
                    if (S > 32) { if (int(ow[j] + 0) != f[j] + 0) { e = 1 } else e = 0 }
                    else { e = ow[j] - f[j]; if (e < 0) e = -e }
                    if (e > worst) worst = e
                }
            }
            printf "  fork, %d runs: mean IoU %.6f .. %.6f; %d run(s) at ours (within 1e-4)", n, lo, hi, same
            if (same) printf ", their anchors vs ours: %s %g", (S > 32 ? "whole-pixel anchors differing:" : "max |diff| px"), worst
            printf "\n"
            ok = oi >= lo - 1e-4 && oi <= hi + 1e-4 && (same == 0 || ((S > 32) ? worst == 0 : worst <= 1e-3))
            exit !ok }' "fork-anchors-$S.txt" || bad "calc_anchors -width $S: ours outside the fork's runs or anchors differ"
done

# ---- map ----------------------------------------------------------------------------
echo
echo "== detector map (ours vs fork, same weights; TOL_MAP $TOL_MAP)"
echo "| -points | -iou_thresh | ours mAP | fork mAP (mean of its per-class AP) | |diff| | ours TP/FP/FN at 0.25 | fork TP/FP/FN at 0.25 |"
echo "|---:|---:|---:|---:|---:|---|---|"
for P in 0 11 101; do
    for I in 0.5 0.75; do
        "$OURS" detector map s.data net.cfg "$W" -points $P -iou_thresh $I > "ours-map-$P-$I.out" 2>&1 ||
            bad "ours map -points $P -iou_thresh $I failed"
        "$FORK" detector map s.data net.cfg "$W" -points $P -iou_thresh $I -dont_show -nocolor 2>&1 |
            nocol > "fork-map-$P-$I.out" || bad "fork map -points $P -iou_thresh $I failed"
        om=$(sed -n 's/^ mean average precision (mAP@[0-9.]*) = \([0-9.]*\).*/\1/p' "ours-map-$P-$I.out")
        otp=$(sed -n 's/.*(TP \([0-9]*\), FP \([0-9]*\), FN \([0-9]*\)).*/\1\/\2\/\3/p' "ours-map-$P-$I.out")
        fm=$(awk '/^  -- ---/ { t = 1; next } t && NF >= 9 && $1 ~ /^[0-9]+$/ { s += $3; n++ } t && NF < 9 { t = 0 }
                  END { if (n) printf "%.6f", s / n / 100 }' "fork-map-$P-$I.out")
        ftp=$(sed -n 's/.*conf_thresh=0.250*, TP=\([0-9]*\), FP=\([0-9]*\), FN=\([0-9]*\).*/\1\/\2\/\3/p' "fork-map-$P-$I.out")
        d=$(awk -v a="${om:-nan}" -v b="${fm:-nan}" 'BEGIN { d = a - b; if (d < 0) d = -d; printf "%.6f", d }')
        echo "| $P | $I | $om | $fm | $d | $otp | $ftp |"
        if [ -z "$om" ] || [ -z "$fm" ]; then bad "map -points $P -iou_thresh $I: no mAP (ours '$om', fork '$fm')"
        elif [ "$P" = 0 ] || [ "$d" != 0.000000 ]; then
            # -points 11|101: the fork is built with -Ofast, so its sample points t/(P-1) are
            # t*(1/(P-1)) and land one ulp above t/(P-1) for some t (3, 6, 7 of 10): where a
            # class's recall is exactly k/truths = t/(P-1) the fork skips that rank. That can
            # only lower its AP, so a fork below ours at -points 11|101 is reported, not failed
            # (bench/RESULTS.md, issue 26: replayed by hand on this set, it is that exactly);
            # a fork above ours, or any all-point difference, beyond TOL_MAP fails.
            if [ "$P" != 0 ] && awk -v a="$om" -v b="$fm" -v t="$TOL_MAP" 'BEGIN { exit !(b <= a + t) }'; then
                echo "  (-points $P -iou_thresh $I: ours - fork = $d, fork lower: the fork's -Ofast sample points, not checked)"
            elif awk -v d="$d" -v t="$TOL_MAP" 'BEGIN { exit !(d > t) }'; then
                bad "map -points $P -iou_thresh $I: ours $om vs fork $fm"; fi
        fi
    done
done

# ---- valid --------------------------------------------------------------------------
echo
echo "== detector valid (the fork: probability > 0.001, NMS 0.6; ours with its defaults)"
rm -rf results; mkdir -p results
"$OURS" detector valid s.data net.cfg "$W" -out ours_ > ours-valid.out 2>&1 || bad "ours valid failed"
"$FORK" detector valid s.data net.cfg "$W" -dont_show -nocolor 2>&1 | nocol > fork-valid.out ||
    bad "fork valid failed"
for c in $(cat set/shapes.names); do
    [ -f "results/comp4_det_test_$c.txt" ] || { bad "fork wrote no results/comp4_det_test_$c.txt"; continue; }
    [ -f "results/ours_$c.txt" ] || { bad "ours wrote no results/ours_$c.txt"; continue; }
    awk -v tp="$TOL_P" -v tb="$TOL_BOX" -v ti="$TOL_IOU" -v nms=0.6 -v c="$c" '
        FNR == NR { n++; id[n] = $1; p[n] = $2; x0[n] = $3; y0[n] = $4; x1[n] = $5; y1[n] = $6; next }
        { m++; fid[m] = $1; fp[m] = $2; fx0[m] = $3; fy0[m] = $4; fx1[m] = $5; fy1[m] = $6 }
        function ab(v) { return v < 0 ? -v : v }
        function iou(a0, b0, a1, b1, c0, d0, c1, d1,   iw, ih, i) {
            iw = (a1 < c1 ? a1 : c1) - (a0 > c0 ? a0 : c0); ih = (b1 < d1 ? b1 : d1) - (b0 > d0 ? b0 : d0)
            if (iw <= 0 || ih <= 0) return 0
            i = iw * ih; return i / ((a1 - a0) * (b1 - b0) + (c1 - c0) * (d1 - d0) - i) }
        # A line of one file only whose box overlaps a better-scored box of the same image in
        # the other file at an IoU within TOL_IOU of the NMS threshold: an NMS decision the
        # rounding of the boxes may turn either way.
        function at_nms(im, pr, a0, b0, a1, b1, other,   i) {
            if (other == "ours") { for (i = 1; i <= n; i++) if (id[i] == im && p[i] > pr && ab(iou(a0, b0, a1, b1, x0[i], y0[i], x1[i], y1[i]) - nms) <= ti) return 1 }
            else { for (i = 1; i <= m; i++) if (fid[i] == im && fp[i] > pr && ab(iou(a0, b0, a1, b1, fx0[i], fy0[i], fx1[i], fy1[i]) - nms) <= ti) return 1 }
            return 0 }
        END {
            for (j = 1; j <= m; j++) {
                best = -1; bd = 1e30
                for (i = 1; i <= n; i++) {
                    if (used[i] || id[i] != fid[j]) continue
                    db = ab(x0[i] - fx0[j]); if (ab(y0[i] - fy0[j]) > db) db = ab(y0[i] - fy0[j])
                    if (ab(x1[i] - fx1[j]) > db) db = ab(x1[i] - fx1[j]); if (ab(y1[i] - fy1[j]) > db) db = ab(y1[i] - fy1[j])
                    dp = ab(p[i] - fp[j])
                    s = dp / tp > db / tb ? dp / tp : db / tb
                    if (s < bd) { bd = s; best = i; bdp = dp; bdb = db }
                }
                if (best > 0 && bd <= 1) { used[best] = 1; ok++; if (bdp > mp) mp = bdp; if (bdb > mb) mb = bdb }
                else if (fp[j] <= 0.001 + tp) edge++
                else if (at_nms(fid[j], fp[j], fx0[j], fy0[j], fx1[j], fy1[j], "ours")) nmsedge++
                else { miss++; if (miss <= 3) printf "  fork only: %s %s %s %s %s %s\n", fid[j], fp[j], fx0[j], fy0[j], fx1[j], fy1[j] }
            }
            for (i = 1; i <= n; i++) if (!used[i]) {
                if (p[i] <= 0.001 + tp) edge++
                else if (at_nms(id[i], p[i], x0[i], y0[i], x1[i], y1[i], "fork")) nmsedge++
                else { extra++; if (extra <= 3) printf "  ours only: %s %s %s %s %s %s\n", id[i], p[i], x0[i], y0[i], x1[i], y1[i] } }
            printf "  %-9s ours %5d lines, fork %5d: %5d matched (max |dprob| %.2g, max |dcorner| %.2g px), %d at the threshold, %d at the NMS IoU, %d fork only, %d ours only\n",
                   c, n, m, ok, mp, mb, edge, nmsedge, miss, extra
            exit (miss + extra) > 0 }' "results/ours_$c.txt" "results/comp4_det_test_$c.txt" ||
        bad "valid, class $c: lines beyond the tolerances"
done

# ---- recall -------------------------------------------------------------------------
echo
echo "== detector recall (both: objectness > 0.001, NMS by objectness 0.4, IoU > 0.5)"
"$OURS" detector recall s.data net.cfg "$W" > ours-recall.out 2>&1 || bad "ours recall failed"
"$FORK" detector recall s.data net.cfg "$W" -dont_show -nocolor 2>&1 | nocol > fork-recall.out ||
    bad "fork recall failed"
ol=$(grep 'RPs/Img' ours-recall.out | tail -1 | tr '\t' ' ')
fl=$(grep 'RPs/Img' fork-recall.out | tail -1 | tr '\t' ' ')
echo "  ours: $ol"
echo "  fork: $fl"
printf '%s\n%s\n' "$ol" "$fl" | awk '
    { gsub(/%/, ""); for (i = 1; i <= NF; i++) { if ($i == "RPs/Img:") r[NR] = $(i + 1); if ($i == "IOU:") u[NR] = $(i + 1)
      if ($i ~ /^Recall:/) { v = $i; sub(/Recall:/, "", v); if (v == "") v = $(i + 1); c[NR] = v } }
      k[NR] = $2 " " $3 }
    function ab(v) { return v < 0 ? -v : v }
    END { d = ab(r[1] - r[2]); e = ab(u[1] - u[2])
          printf "  found/total ours %s, fork %s; RPs/Img |diff| %.3f; mean best IoU |diff| %.4f %%\n", k[1], k[2], d, e
          # printed to 2 decimals (ours) and 6 digits (fork): half a unit of the last place each
          exit !(k[1] == k[2] && d <= 0.01 && e <= 0.011) }' || bad "recall: counts differ or numbers beyond the printed precision"

echo
if [ $fail -ne 0 ]; then echo "compare_cmds.sh: differences beyond the tolerances (DIFF lines above)"; exit 1; fi
echo "compare_cmds.sh: every command within its tolerance of the fork's"
