#!/usr/bin/env python3
"""Naive PyTorch autograd baseline for in-batch contrastive MaxSim training at ColPali shape:
einsum -> max -> sum over a [B, B, Lq, Ld] similarity tensor, cross-entropy with the positives on the
diagonal, backward. fp16 inputs, CUDA events, median of --iters steps after one warm-up; prints one
JSON object per B: {"B", "status": "ok" | "oom", "ms", "peak_extra_bytes"} where the peak is beyond
the inputs.
Usage: torch_train.py --batch 128 --batch 256 [--lq 1024 --ld 1024 --dim 128 --iters 3]"""
import argparse
import json

import torch


def step(q, d, temperature):
    s = torch.einsum("qid,bjd->qbij", q, d)  # [B, B, Lq, Ld]
    scores = s.max(dim=3).values.float().sum(dim=2)  # [B, B]
    loss = torch.nn.functional.cross_entropy(scores / temperature, torch.arange(q.shape[0], device=q.device))
    loss.backward()
    return loss


def run(b, lq, ld, dim, iters):
    torch.cuda.empty_cache()
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.nn.functional.normalize(torch.randn(b, lq, dim, device="cuda", generator=gen), dim=-1).half().requires_grad_()
    d = torch.nn.functional.normalize(torch.randn(b, ld, dim, device="cuda", generator=gen), dim=-1).half().requires_grad_()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = {"B": b, "shape": f"{b},{lq},{ld},{dim},{b}", "method": "torch autograd einsum-max-sum + cross-entropy, fp16"}
    try:
        step(q, d, 0.05)
        times = []
        for _ in range(iters):
            q.grad = None
            d.grad = None
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step(q, d, 0.05)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        out.update(status="ok", ms=times[len(times) // 2])
    except torch.OutOfMemoryError:
        out.update(status="oom")
    out["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base
    del q, d
    torch.cuda.empty_cache()
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, action="append", required=True)
    p.add_argument("--lq", type=int, default=1024)
    p.add_argument("--ld", type=int, default=1024)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--iters", type=int, default=3)
    a = p.parse_args()
    for b in a.batch:
        print(json.dumps(run(b, a.lq, a.ld, a.dim, a.iters)), flush=True)


if __name__ == "__main__":
    main()
