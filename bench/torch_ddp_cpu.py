"""PyTorch DDP on the CPU (gloo), the reference of bench/bench_cpu_conv.sh.

The network is bench/gpu/torch_yolov3_tiny.py's translation of a Darknet
cfg (convolutional + batch norm + leaky, maxpool, upsample, route, the
yolo heads' inputs); each of NPROC processes trains it with SGD on random
in-memory batches of BATCH images, one intra-op thread per process when
there are several (as scalednn gives each replica one OpenBLAS/oneDNN
thread), gradients averaged by DistributedDataParallel over gloo.  The loss
is a squared error on the heads' outputs: Darknet's yolo loss runs on the
host in scalednn and is not part of this reference (so the comparison
favours PyTorch slightly).  Prints images/s over all processes and each
process's peak resident memory.

  python3 bench/torch_ddp_cpu.py CFG --nproc 2 --batch 8 --size 128 --steps 30
"""
import argparse
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
from torch_yolov3_tiny import Net, parse_cfg  # noqa: E402


def worker(rank, a, port, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    torch.manual_seed(1 + rank)
    blocks = parse_cfg(a.cfg)
    net = Net(blocks, int(blocks[0].get("channels", 3)))
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    xs = [torch.rand(a.batch, 3, a.size, a.size) for _ in range(3)]
    warm = 3
    for s in range(a.steps):
        if s == warm:
            dist.barrier()
            t0 = time.time()
        heads = ddp(xs[s % 3])
        loss = sum((h * h).mean() for h in heads)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    dist.barrier()
    dt = time.time() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    q.put((rank, (a.steps - warm) * a.batch / dt, rss))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cfg")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="0: 1 per process, all cores for one")
    ap.add_argument("--port", type=int, default=29517)
    a = ap.parse_args()
    if a.threads < 1:
        a.threads = 1 if a.nproc > 1 else (os.cpu_count() or 1)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=worker, args=(r, a, a.port, q)) for r in range(a.nproc)]
    for p in ps:
        p.start()
    res = [q.get() for _ in ps]
    for p in ps:
        p.join()
    if any(p.exitcode for p in ps):
        sys.exit("torch_ddp_cpu: a process failed")
    ips = sum(r[1] for r in res)
    rss = max(r[2] for r in res)
    print(f"RESULT torch images_per_s={ips:.2f} rss_mib_per_replica={rss:.0f} "
          f"torch={torch.__version__}")


if __name__ == "__main__":
    main()
