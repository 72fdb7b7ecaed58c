#!/bin/sh
# Prints the stock-vs-scalednn comparison of training CSVs (written by
# `./darknet detector train ... -csv FILE` or [scalednn] csv=FILE).
#   scripts/compare.sh LABEL=FILE.csv [LABEL=FILE.csv ...]
# Per run: steps, iterations reached, images, wall time of the steps,
# images/s, median step time, final average loss, bytes exchanged per step,
# the mean exposed communication per step (stock: its weight averaging spread
# over the steps), and the mean time a step waited for the slower replica
# (scalednn mode).
set -eu
printf '%-22s %6s %6s %7s %8s %8s %9s %9s %10s %11s %11s\n' run steps iters images "time(s)" \
    "img/s" "step(ms)" "avg loss" "MB/step" "exposed(ms)" "sync(ms)"
for arg in "$@"; do
    label=${arg%%=*}
    file=${arg#*=}
    awk -F, -v label="$label" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { n++; s = $c["seconds"]; t += s; st[n] = s * 1000; ex += $c["exposed_comm_s"] * 1000;
          sy += $c["sync_wait_s"] * 1000; bytes += $c["bytes_exchanged"];
          iters = $c["iteration"]; images = $c["images"]; avg = $c["avg_loss"] }
        function median(a, n,    i, j, tmp) {
            for (i = 2; i <= n; i++) { tmp = a[i]; j = i - 1;
                while (j > 0 && a[j] > tmp) { a[j + 1] = a[j]; j-- } a[j + 1] = tmp }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
        END {
            if (n == 0) { printf "%-22s (no rows)\n", label; exit }
            printf "%-22s %6d %6d %7d %8.2f %8.1f %9.2f %9.4f %10.3f %11.3f %11.3f\n", label, n,
                   iters, images, t, images / t, median(st, n), avg, bytes / n / 1e6, ex / n,
                   sy / n }' "$file"
done
