#!/bin/sh
# What the 1x1 delta fix buys: cfg/shapes-res.cfg (a Darknet-53-style residual
# detector) trained to a validation mAP three ways, same seeds:
#   darknet   stock protocol, fix_1x1_delta=0, cpu_conv=darknet: Darknet as users
#             have it (libdarknet's convolutions, the shortcut gradient behind every
#             1x1 convolution lost; oneDNN's backward would add it)
#   stock     stock protocol on the fixed engine (no [scalednn] section: the
#             defaults, cpu_conv=auto)
#   scalednn  mode=scalednn, compress=none, on the fixed engine (the same cpu_conv)
#
#   sh bench/tta_res.sh      # REPLICAS=2 SEEDS="1 2 3" TARGET=0.30 MAX=1500 EVERY=100
#
# APPEND=1 keeps the results of earlier seeds (runs/tta-res/*.runs) and adds
# these seeds' to the table.
# Per variant the medians over seeds of iterations and wall time to the
# first evaluation >= TARGET (-map -target; evaluation time not counted),
# or "not reached" with the best mAP.  CSVs and logs stay in runs/tta-res/.
set -eu
cd "$(dirname "$0")/.."
REPLICAS=${REPLICAS:-2}
SEEDS=${SEEDS:-"1 2 3"}
TARGET=${TARGET:-0.30}
MAX=${MAX:-1500}
EVERY=${EVERY:-100}
VARIANTS=${VARIANTS:-"darknet stock scalednn"}
BIN=${BIN:-./darknet}
OUT=runs/tta-res
mkdir -p "$OUT"
[ -x "$BIN" ] || make -j2 >/dev/null
[ -f data/shapes/train.txt ] || "$BIN" scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null
gpus=$(seq -s, 0 $((REPLICAS - 1)))

cfg_of() {
    case $1 in
    darknet) { cat cfg/shapes-res.cfg; printf '\n[scalednn]\nmode=stock\nfix_1x1_delta=0\ncpu_conv=darknet\n'; } >"$OUT/darknet.cfg" ;;
    stock) cp cfg/shapes-res.cfg "$OUT/stock.cfg" ;;
    scalednn) { cat cfg/shapes-res.cfg; printf '\n[scalednn]\nmode=scalednn\nbackend=local\nbucket_mb=0.25\noverlap=1\ncompress=none\n'; } >"$OUT/scalednn.cfg" ;;
    esac
    echo "$OUT/$1.cfg"
}

# "seconds iterations mAP" at the first evaluation >= target, or "NA NA best"
tta_of() {
    awk -F, -v target="$2" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        $c["map"] != "" {
            m = $c["map"] + 0
            if (m > best) best = m
            if (m >= target && !done) { printf "%.2f %d %.4f\n", $c["elapsed_s"], $c["iteration"], m; done = 1; exit }
        }
        END { if (!done) printf "NA NA %.4f\n", best }' "$1"
}
median() { grep -v '^NA$' | sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "NA"; else print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

[ "${APPEND:-0}" = 1 ] || rm -f "$OUT"/*.runs
for seed in $SEEDS; do
    for v in $VARIANTS; do
        cfg=$(cfg_of "$v")
        tag="$v-s$seed"
        sed "s#^backup=.*#backup=$OUT/backup-$tag#" cfg/shapes.data >"$OUT/$tag.data"
        "$BIN" detector train "$OUT/$tag.data" "$cfg" -gpus "$gpus" -max_batches "$MAX" -seed "$seed" \
            -map -map_every "$EVERY" -target "$TARGET" -csv "$OUT/$tag.csv" >"$OUT/$tag.log" 2>&1 ||
            { tail -5 "$OUT/$tag.log"; exit 1; }
        rm -rf "$OUT/backup-$tag"
        r=$(tta_of "$OUT/$tag.csv" "$TARGET")
        echo "$r" >>"$OUT/$v.runs"
        echo "$tag: $r"
    done
done

echo
echo "| variant | reached | iterations to mAP $TARGET | time (s) | mAP there | best mAP of the misses |"
echo "|---|---:|---:|---:|---:|---:|"
for v in $VARIANTS; do
    f="$OUT/$v.runs"
    runs=$(wc -l <"$f")
    reached=$(awk '$1 != "NA"' "$f" | wc -l)
    it=$(awk '{ print $2 }' "$f" | median)
    t=$(awk '{ print $1 }' "$f" | median)
    acc=$(awk '$1 != "NA" { print $3 }' "$f" | median)
    miss=$(awk '$1 == "NA" { print $3 }' "$f" | median)
    echo "| $v | $reached/$runs | $it | $t | $acc | $miss |"
done
