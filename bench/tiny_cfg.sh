# bench/tiny_cfg.sh: sourced by bench scripts (lab_yolo.sh, tta_lab.sh, bench_cpu_conv.sh).
#   tiny_cfg OUT_CFG RES BATCH [SED_ARG ...]
# Writes Debian's yolov3-tiny.cfg for the shapes set: RES x RES input, BATCH images a
# step, 4 classes, the shapes set's anchors (cfg/shapes.cfg, 64x64 pixels) scaled to
# RES, no random resize, a short burn-in; extra sed arguments (-e ...) are applied too.
# Returns non-zero when Debian's cfg is not the one these edits expect.
tiny_cfg() {
    tc_out=$1 tc_res=$2 tc_batch=$3
    shift 3
    tc_anchors=$(sed -n 's/^anchors *= *//p' cfg/shapes.cfg | head -1 | tr -d ' ' | tr , '\n' |
                 awk -v s="$tc_res" '{ printf "%s%d", (NR > 1 ? "," : ""), $1 * s / 64 + 0.5 }')
    sed -e "s/^batch=1$/batch=$tc_batch/" -e "s/^subdivisions=1$/subdivisions=1/" \
        -e "s/^width=416/width=$tc_res/" -e "s/^height=416/height=$tc_res/" \
        -e "s/^classes=80/classes=4/" -e "s/^filters=255/filters=27/" \
        -e "s/^anchors *=.*/anchors = $tc_anchors/" -e "s/^random=1/random=0/" \
        -e "s/^burn_in=1000/burn_in=100/" -e "s/^max_batches *= *500200/max_batches=100000/" \
        "$@" /usr/share/darknet/cfg/yolov3-tiny.cfg >"$tc_out" || return 1
    grep -q "^width=$tc_res" "$tc_out" && grep -q "^filters=27" "$tc_out"
}

# lab_setup OUT RES BATCH: the lab scripts' (lab_yolo.sh, tta_lab.sh) common start in folder
# OUT: the shapes set (generated if missing), OUT/shapes.data with backup=OUT/backup, and
# OUT/yolov3-tiny-shapes.cfg: tiny_cfg with lr 0.002 and the lr steps at 80000,90000 (a
# from-scratch run).  Returns non-zero when Debian's cfg is not the expected one.
lab_setup() {
    ls_out=$1 ls_res=$2 ls_batch=$3
    [ -f data/shapes/train.txt ] ||
        ./darknet scalednn gen-shapes data/shapes -n 512 -valid 64 -seed 1 >/dev/null || return 1
    sed "s#^backup=.*#backup=$ls_out/backup#" cfg/shapes.data >"$ls_out/shapes.data" || return 1
    mkdir -p "$ls_out/backup"
    tiny_cfg "$ls_out/yolov3-tiny-shapes.cfg" "$ls_res" "$ls_batch" \
        -e "s/^learning_rate=0.001/learning_rate=0.002/" -e "s/^steps=400000,450000/steps=80000,90000/"
}
