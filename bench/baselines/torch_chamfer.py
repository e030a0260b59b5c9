#!/usr/bin/env python3
"""Naive PyTorch autograd baseline for the Chamfer distance: torch.cdist -> square -> min over each
side -> mean -> sum over pairs, backward, on fp32 points [B, N, d] and [B, M, d] (the [B, N, M]
distance matrix is materialized, as in the usual implementations). Median of --iters steps after one
warm-up; CUDA events on the GPU, wall time on the CPU. Prints one JSON object per shape:
{"shape", "device", "status": "ok" | "oom", "ms", "forward_ms", "peak_extra_bytes"} (the peak beyond
the inputs, GPU only), or {"status": "unavailable", "reason"} when torch is missing.
Usage: torch_chamfer.py --shape 32,8192,8192,3 [--shape ...] [--device cuda|cpu] [--iters 5]"""
import argparse
import json
import sys
import time

try:
    import torch
except ImportError as e:  # reported, not raised: the caller prints the reason
    print(json.dumps({"status": "unavailable", "reason": f"python3 cannot import torch ({e})"}))
    sys.exit(0)


def loss_of(p, q):
    d2 = torch.cdist(p, q).square()  # [B, N, M]
    return d2.min(dim=2).values.mean(dim=1).sum() + d2.min(dim=1).values.mean(dim=1).sum()


def timed(fn, dev):
    if dev == "cuda":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        return s.elapsed_time(e)
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def run(shape, dev, iters):
    b, n, m, d = (int(x) for x in shape.split(","))
    out = {"shape": shape, "device": dev, "method": "torch cdist + square + min both ways + autograd, fp32"}
    if dev == "cuda":
        torch.cuda.empty_cache()
    gen = torch.Generator(device=dev).manual_seed(3)
    p = (torch.rand(b, n, d, device=dev, generator=gen) * 2 - 1).requires_grad_()
    q = (torch.rand(b, m, d, device=dev, generator=gen) * 2 - 1).requires_grad_()
    if dev == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()

    def step():
        p.grad = None
        q.grad = None
        loss_of(p, q).backward()

    def forward():
        with torch.no_grad():
            loss_of(p, q)

    try:
        step()
        times = sorted(timed(step, dev) for _ in range(iters))
        fwd = sorted(timed(forward, dev) for _ in range(iters))
        out.update(status="ok", ms=times[len(times) // 2], forward_ms=fwd[len(fwd) // 2])
    except (torch.OutOfMemoryError, RuntimeError) as e:  # the CPU allocator raises RuntimeError
        if "memory" not in str(e).lower() and "allocate" not in str(e).lower():
            raise
        out.update(status="oom")
    if dev == "cuda":
        out["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base
    del p, q
    if dev == "cuda":
        torch.cuda.empty_cache()
    return out


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--shape", action="append", required=True)
    a.add_argument("--device", default="cuda")
    a.add_argument("--iters", type=int, default=5)
    args = a.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print(json.dumps({"status": "unavailable", "reason": "torch has no CUDA device"}))
        return
    for s in args.shape:
        print(json.dumps(run(s, args.device, args.iters)), flush=True)


if __name__ == "__main__":
    main()
