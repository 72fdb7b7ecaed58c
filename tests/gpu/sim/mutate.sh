#!/bin/sh
# mutate.sh NAME OUT: writes to OUT a copy of one real .cu file of
# plugin/cuda with one defect put in (the mutant NAME), for
# tests/gpu/sim/mutants.cu.  Each mutant replaces one exact text that must
# occur exactly once in the real file: when the kernel changes so that the
# text is gone (or appears twice), the build stops here rather than building
# the unchanged kernel under a mutant's name.
#
#   codec-int8-nosync  k_int8_enc's max-reduction without the __syncthreads
#                      inside its loop (a shared-memory race)
#   codec-int8-short   k_int8_enc's shared array one slot short
#   kernels-fill-floor sdnn_k_fill's grid n/256 instead of ceil(n/256)
#                      (below 256 elements: a zero-sized grid)
#   bn-nosync          k_channel_partial's tree reduction without the
#                      __syncthreads inside its loop
#   bn-finish-floor    k_finish_mean's grid C/128 instead of ceil(C/128)
#                      (channels past the last whole 128 never written)
#   bn-bound           k_finish_mean's bounds check ch > C instead of ch >= C
#   bn-grid-y          the partial sums' blocks laid out (parts, channels):
#                      gridDim.y over 65,535 for a wide connected layer
set -eu
name=$1
out=$2
case "$name" in
codec-int8-nosync)
    src=plugin/cuda/codec.cu
    old='            red[threadIdx.x] = red[threadIdx.x + w];
        __syncthreads();'
    new='            red[threadIdx.x] = red[threadIdx.x + w];' ;;
codec-int8-short)
    src=plugin/cuda/codec.cu
    old='SDNN_SHARED(uint32_t, red, SDNN_THREADS);'
    new='SDNN_SHARED(uint32_t, red, SDNN_THREADS - 1);' ;;
kernels-fill-floor)
    src=plugin/cuda/kernels.cu
    old='SDNN_LAUNCH(k_fill, sdnn_grid(n),'
    new='SDNN_LAUNCH(k_fill, (unsigned)(n / SDNN_THREADS),' ;;
bn-nosync)
    src=plugin/cuda/bn.cu
    old='                sh[k * SDNN_THREADS + threadIdx.x] += sh[k * SDNN_THREADS + threadIdx.x + w];
        __syncthreads();'
    new='                sh[k * SDNN_THREADS + threadIdx.x] += sh[k * SDNN_THREADS + threadIdx.x + w];' ;;
bn-finish-floor)
    src=plugin/cuda/bn.cu
    old='static unsigned ch_grid(int C) { return (unsigned)((C + 127) / 128); }'
    new='static unsigned ch_grid(int C) { return (unsigned)(C / 128 > 0 ? C / 128 : 1); }' ;;
bn-bound)
    src=plugin/cuda/bn.cu
    old='__global__ void k_finish_mean(const float *partial, int C, int parts, float scale, float *out)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;'
    new='__global__ void k_finish_mean(const float *partial, int C, int parts, float scale, float *out)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch > C) return;' ;;
bn-grid-y)
    src=plugin/cuda/bn.cu
    old='    *grid = dim3((unsigned)b);'
    new='    *grid = dim3((unsigned)parts, (unsigned)(C > 0 ? C : 1));' ;;
*)
    echo "mutate.sh: no mutant named $name" >&2
    exit 2 ;;
esac
OLD=$old NEW=$new perl -0777 -e '
    my ($src, $out) = @ARGV;
    open(my $in, "<", $src) or die "mutate.sh: $src: $!\n";
    local $/; my $t = <$in>; close $in;
    my ($old, $new) = ($ENV{OLD}, $ENV{NEW});
    my $n = () = $t =~ /\Q$old\E/g;
    die "mutate.sh: the text the mutant replaces occurs $n times in $src (expected once)\n"
        unless $n == 1;
    $t =~ s/\Q$old\E/$new/;
    open(my $o, ">", "$out.tmp") or die "mutate.sh: $out: $!\n";
    print $o "/* mutant of $src (tests/gpu/sim/mutate.sh) */\n#line 1 \"$src\"\n", $t;
    close $o or die "mutate.sh: $out: $!\n";
    rename("$out.tmp", $out) or die "mutate.sh: $out: $!\n";
' "$src" "$out"
