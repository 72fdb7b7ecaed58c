#!/usr/bin/env python3
"""PyTorch reference for bench/gpu: yolov3-tiny training throughput.

Reads the layers of a Darknet cfg (convolutional with batch norm and
leaky/linear, maxpool, upsample, route, shortcut with a linear activation,
yolo) and builds the same network
in PyTorch; trains it with SGD (momentum 0.9, weight decay 5e-4) on random
in-memory batches and prints images/s.  The loss is a plain squared error
on the two heads' outputs: Darknet's YOLO loss runs on the host in both
stock Darknet and scalednn, so this reference leaves it out (compare the
host-loss time bench_gpu prints).

  python3 torch_yolov3_tiny.py CFG [--batch 64] [--size 416] [--steps 20]
                                   [--tf32 | --no-tf32] [--channels-last]
"""
import argparse
import time

import torch
import torch.nn as nn


def parse_cfg(path):
    blocks, cur = [], None
    for line in open(path):
        line = line.split("#")[0].strip()
        if not line:
            continue
        if line.startswith("["):
            cur = {"type": line[1:-1].strip()}
            blocks.append(cur)
        elif "=" in line:
            k, v = line.split("=", 1)
            cur[k.strip()] = v.strip()
    return blocks


class Net(nn.Module):
    def __init__(self, blocks, channels):
        super().__init__()
        self.blocks = blocks[1:]
        self.mods = nn.ModuleList()
        outs = []
        c = channels
        for b in self.blocks:
            t = b["type"]
            m = nn.Identity()
            if t == "convolutional":
                f, s = int(b["filters"]), int(b["size"])
                st = int(b.get("stride", 1))
                pad = s // 2 if int(b.get("pad", 0)) else 0
                bn = int(b.get("batch_normalize", 0))
                layers = [nn.Conv2d(c, f, s, st, pad, bias=not bn)]
                if bn:
                    layers.append(nn.BatchNorm2d(f, momentum=0.01, eps=1e-5))
                if b.get("activation", "linear") == "leaky":
                    layers.append(nn.LeakyReLU(0.1))
                m = nn.Sequential(*layers)
                c = f
            elif t == "maxpool":
                s, st = int(b["size"]), int(b["stride"])
                if st == 1:  # Darknet pads to keep the size
                    m = nn.Sequential(nn.ZeroPad2d((0, s - 1, 0, s - 1)), nn.MaxPool2d(s, 1))
                else:
                    m = nn.MaxPool2d(s, st)
            elif t == "upsample":
                m = nn.Upsample(scale_factor=int(b["stride"]), mode="nearest")
            elif t == "route":
                idx = [int(x) for x in b["layers"].split(",")]
                idx = [i if i >= 0 else len(outs) + i for i in idx]
                b["_idx"] = idx
                c = sum(outs[i] for i in idx)
            elif t == "shortcut":
                i = int(b["from"])
                b["_from"] = i if i >= 0 else len(outs) + i
                if b.get("activation", "linear") != "linear" or outs[b["_from"]] != c:
                    raise ValueError("shortcut: only a linear one of equal channels")
            self.mods.append(m)
            outs.append(c)

    def forward(self, x):
        seen, heads = [], []
        for b, m in zip(self.blocks, self.mods):
            t = b["type"]
            if t == "route":
                x = torch.cat([seen[i] for i in b["_idx"]], 1)
            elif t == "shortcut":
                x = x + seen[b["_from"]]
            elif t == "yolo":
                heads.append(x)
            else:
                x = m(x)
            seen.append(x)
        return heads


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cfg")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=416)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tf32", dest="tf32", action="store_true", default=True)
    ap.add_argument("--no-tf32", dest="tf32", action="store_false")
    ap.add_argument("--channels-last", action="store_true")
    a = ap.parse_args()
    torch.backends.cudnn.allow_tf32 = a.tf32
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.benchmark = True
    dev = torch.device("cuda")
    blocks = parse_cfg(a.cfg)
    net = Net(blocks, int(blocks[0].get("channels", 3))).to(dev)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    net = net.to(memory_format=fmt)
    opt = torch.optim.SGD(net.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    xs = [torch.rand(a.batch, 3, a.size, a.size, device=dev).to(memory_format=fmt) for _ in range(3)]
    warm = 3
    for s in range(a.steps):
        if s == warm:
            torch.cuda.synchronize()
            t0 = time.time()
        heads = net(xs[s % 3])
        loss = sum((h * h).mean() for h in heads)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    dt = time.time() - t0
    n = a.steps - warm
    print(f"torch {a.cfg} {a.size}x{a.size} batch {a.batch} tf32={a.tf32}: "
          f"images/s {n * a.batch / dt:.1f}  step {1e3 * dt / n:.2f} ms")
    print(f"RESULT torch images_per_s={n * a.batch / dt:.1f}")


if __name__ == "__main__":
    main()
