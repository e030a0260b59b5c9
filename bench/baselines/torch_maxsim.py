#!/usr/bin/env python3
"""Naive PyTorch MaxSim (einsum -> max -> sum, what users write today), timed the way maxsim bench
times its kernels: fp16 inputs, CUDA events, median of the timed runs after warm-up, inputs rotated
so that the working set exceeds L2. Prints one JSON object per shape:
  {"shape": "Nq,Lq,Ld,d,B", "ms": median, "peak_extra_bytes": ..., "status": "ok" | "oom", "max_rel_err": ...}
Usage: torch_maxsim.py --shape 1,32,128,128,100000 [--shape ...] [--iters 20] [--warmup 5] [--warmup-ms 1000]
"""
import argparse
import json
import sys
import time

import torch

L2_BYTES = 60 * 1024 * 1024


def naive(q, d):
    # q [Nq, Lq, dim], d [B, Ld, dim] -> [Nq, B]
    if q.shape[0] == 1:
        s = torch.einsum("id,bjd->bij", q[0], d)  # [B, Lq, Ld]
        return s.max(dim=2).values.float().sum(dim=1)[None, :]
    s = torch.einsum("qid,bjd->qbij", q, d)  # [Nq, B, Lq, Ld]
    return s.max(dim=3).values.float().sum(dim=2)


def unit(shape, gen):
    x = torch.randn(*shape, device="cuda", dtype=torch.float32, generator=gen)
    return torch.nn.functional.normalize(x, dim=-1).half()


def run(shape, iters, warmup, warmup_ms):
    nq, lq, ld, dim, b = shape
    gen = torch.Generator(device="cuda").manual_seed(1234)
    doc_bytes = b * ld * dim * 2
    copies = max(1, min(4, -(-2 * L2_BYTES // max(doc_bytes, 1))))
    qs = [unit((nq, lq, dim), gen) for _ in range(copies)]
    ds = [unit((b, ld, dim), gen) for _ in range(copies)]
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = {"shape": ",".join(map(str, shape)), "method": "torch einsum-max-sum fp16"}
    try:
        got = naive(qs[0], ds[0])
        # correctness against fp32 products on a few documents
        sub = min(b, 64)
        ref = torch.einsum("qid,bjd->qbij", qs[0].float(), ds[0][:sub].float()).max(dim=3).values.sum(dim=2)
        out["max_rel_err"] = float(((got[:, :sub] - ref).abs() / ref.abs().clamp_min(1e-6)).max())
        del got
        for i in range(warmup):
            naive(qs[i % copies], ds[i % copies])
        # then about warmup_ms of load (--warmup-ms 1000: the sustained, power-capped regime of
        # bench/NOTES.md, 'The power cap'; 0, the default: the anchors' burst method)
        start = time.perf_counter()
        while (time.perf_counter() - start) * 1e3 < warmup_ms:
            naive(qs[0], ds[0])
            torch.cuda.synchronize()
        times = []
        for i in range(iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            naive(qs[i % copies], ds[i % copies])
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        times.sort()
        out["ms"] = times[len(times) // 2]
        out["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base
        out["status"] = "ok"
    except torch.OutOfMemoryError:
        out["status"] = "oom"
        out["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base
    del qs, ds
    torch.cuda.empty_cache()
    return out


def ceilings(iters=20):
    """The ceilings of this GPU, measured now: device copy bandwidth (bytes read + written) and the
    dense fp16 tensor-core GEMM rate (8192^3 on random data), burst (each GEMM timed alone after 3
    warm-ups: ~30 ms of load) and sustained (after 2 s of back-to-back GEMMs, 50 timed back to back:
    the clocks the power cap leaves, which is what a kernel of tens of ms or a loop of them gets)."""
    def timed(fn):
        for _ in range(3):
            fn()
        ts = []
        for _ in range(iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e))
        ts.sort()
        return ts[len(ts) // 2]

    n = 1 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    copy_ms = timed(lambda: dst.copy_(src))
    del src, dst
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    mm_ms = timed(lambda: a @ b)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        a @ b
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(50):
        a @ b
    e.record()
    e.synchronize()
    sustained_ms = s.elapsed_time(e) / 50
    del a, b
    torch.cuda.empty_cache()
    return {
        "ceilings": True,
        "device": torch.cuda.get_device_name(),
        "copy_gbps": 2 * n / copy_ms / 1e6,
        "fp16_gemm_tflops": 2 * 8192**3 / mm_ms / 1e9,
        "fp16_gemm_sustained_tflops": 2 * 8192**3 / sustained_ms / 1e9,
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", action="append", default=[])
    p.add_argument("--ceilings", action="store_true", help="also measure copy bandwidth and fp16 GEMM rate")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--warmup-ms", type=float, default=0.0)
    a = p.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"status": "unavailable", "reason": "torch sees no CUDA device"}))
        return 1
    if a.ceilings:
        print(json.dumps(ceilings()), flush=True)
    for s in a.shape:
        shape = tuple(int(x) for x in s.split(","))
        print(json.dumps(run(shape, a.iters, a.warmup, a.warmup_ms)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
