# Sourced by bench/bench_mpi_lab.sh and bench/lab_yolo.sh (not run alone).
#
# lab_stats CSV: one run's figures from rank 0's per-iteration CSV, over the
# rows after the first $WARM: images/s (images / summed step seconds), the
# median step in ms, bytes exchanged per step and exposed communication in
# ms per step, tab-separated.
lab_stats() {
    med=$(awk -F, -v warm="$WARM" '/^#/ { next } !h { for (i = 1; i <= NF; i++) c[$i] = i; h = 1; next }
            { r++ } r > warm { print $c["seconds"] }' "$1" | sort -g |
          awk '{ a[NR] = $1 } END { if (NR) print 1000 * (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }')
    awk -F, -v warm="$WARM" -v med="$med" '
        /^#/ { next }
        !hdr { for (i = 1; i <= NF; i++) c[$i] = i; hdr = 1; next }
        { r++ }
        r == warm { im0 = $c["images"] }
        r > warm { n++; t += $c["seconds"]; b += $c["bytes_exchanged"]; ex += $c["exposed_comm_s"];
                   im = $c["images"] }
        END { if (n) printf "%.2f\t%.1f\t%.0f\t%.1f\n", (im - im0) / t, med, b / n, 1000 * ex / n }' "$1"
}

# The awk median of a[1..n] (insertion sort), for the tables' awk programs:
# awk "$LAB_AWK_MED"' ... med(a, n) ...'
LAB_AWK_MED='
    function med(a, n,   i, j, t) {
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
            t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
        return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }'
