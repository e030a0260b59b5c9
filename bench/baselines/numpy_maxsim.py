#!/usr/bin/env python3
"""The CPU baseline users reach for today: numpy matmul -> max -> sum (OpenBLAS sgemm inside).
Prints one JSON object per shape: {"shape", "ms" (best of --repeats), "gflops"}.
Usage: numpy_maxsim.py --shape 1,32,128,128,20000 [--repeats 5]
Note: this machine sets OPENBLAS_CORETYPE; unset it (and OPENBLAS_L2_SIZE) in the same command to
let OpenBLAS pick its best kernel, as bench/NOTES.md, 'The machine', records."""
import argparse
import json
import time

import numpy as np


def run(shape, repeats):
    nq, lq, ld, d, b = shape
    rng = np.random.default_rng(1)
    q = rng.standard_normal((nq, lq, d), dtype=np.float32)
    docs = rng.standard_normal((b, ld, d), dtype=np.float32)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        for i in range(nq):
            # One large sgemm over all document tokens (the fastest numpy formulation), then reduce.
            sim = (docs.reshape(b * ld, d) @ q[i].T).reshape(b, ld, lq)
            sim.max(axis=1).sum(axis=1)
        best = min(best, time.perf_counter() - t)
    flops = 2 * nq * lq * ld * d * b
    return {"shape": ",".join(map(str, shape)), "method": "numpy matmul-max-sum fp32", "ms": best * 1e3, "gflops": flops / best / 1e9}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", action="append", required=True)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    for s in a.shape:
        print(json.dumps(run(tuple(int(x) for x in s.split(",")), a.repeats)), flush=True)


if __name__ == "__main__":
    main()
