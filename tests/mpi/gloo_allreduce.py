"""gloo_allreduce: PyTorch's gloo allreduce (fp32 sum), timed like
bench-comm -d mpi and tests/mpi/mpi_allreduce, for comparison.  Optional:
needs torch (pip install torch; not a dependency of scalednn).

Launched by mpirun (one process per rank; rank and size come from
OMPI_COMM_WORLD_RANK/SIZE), e.g. on loopback

    sh tests/mpi/run.sh 2 python3 tests/mpi/gloo_allreduce.py

or across scripts/netlab.sh's namespaces (rank 0's address is
$SDNN_LAB_NET.1, the interface eth0):

    sh scripts/netlab.sh -k 2 -rate 1gbit -- python3 tests/mpi/gloo_allreduce.py

Options: -b MIN -e MAX (bytes per rank, K/M suffixes), -f FACTOR, -n ITERS,
-w WARMUP.  Per size: WARMUP calls, a barrier, ITERS timed calls (mean),
and a check: small-integer inputs, so the sum is exact (#wrong).
busbw = size x 2(P-1)/P / time.  Rank 0 prints.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def parse_bytes(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(s[-1].lower(), 1)
    return int(float(s[:-1] if mult > 1 else s) * mult) // 4 * 4


def main():
    opts = {"-b": "4M", "-e": "64M", "-f": "2", "-n": "5", "-w": "1"}
    args = sys.argv[1:]
    while args:
        if args[0] not in opts or len(args) < 2:
            sys.exit("usage: gloo_allreduce.py [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARMUP]")
        opts[args[0]] = args[1]
        args = args[2:]
    lo, hi = parse_bytes(opts["-b"]), parse_bytes(opts["-e"])
    factor, iters, warmup = float(opts["-f"]), int(opts["-n"]), int(opts["-w"])

    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
    lab = os.environ.get("SDNN_LAB_NET")
    master = lab + ".1" if lab else "127.0.0.1"
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0" if lab else "lo")
    dist.init_process_group("gloo", init_method="tcp://%s:29517" % master, rank=rank,
                            world_size=size)
    torch.set_num_threads(1)
    if rank == 0:
        print("# gloo allreduce (float32, SUM), torch %s, %d processes, %d warm-up + %d timed"
              % (torch.__version__, size, warmup, iters))
        print("#%12s %12s %10s %9s %9s %8s" % ("size", "count", "time", "algbw", "busbw", "#wrong"))
        print("#%12s %12s %10s %9s %9s %8s" % ("(B)", "(elems)", "(us)", "(GB/s)", "(GB/s)", ""))
        sys.stdout.flush()
    b = lo
    bad = 0
    while b <= hi:
        n = b // 4
        base = (torch.arange(n, dtype=torch.int64) % 7).to(torch.float32)
        x = base + rank
        for _ in range(warmup):
            y = x.clone()
            dist.all_reduce(y)
        dist.barrier()
        t = 0.0
        for _ in range(iters):
            y = x.clone()               # the copy is outside the timing
            t0 = time.perf_counter()
            dist.all_reduce(y)
            t += time.perf_counter() - t0
        t = torch.tensor([t / iters], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        want = base * size + size * (size - 1) // 2
        wrong = torch.tensor([int((y != want).sum())], dtype=torch.int64)
        dist.all_reduce(wrong)
        if rank == 0:
            tt = float(t[0])
            algbw = b / tt / 1e9
            print(" %12d %12d %10.1f %9.3f %9.3f %8d"
                  % (b, n, tt * 1e6, algbw, algbw * 2 * (size - 1) / size, int(wrong[0])))
            sys.stdout.flush()
        bad += int(wrong[0])
        b = max(int(b * factor) // 4 * 4, b + 4)
    dist.destroy_process_group()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
