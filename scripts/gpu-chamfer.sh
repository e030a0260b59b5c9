#!/bin/bash
# On the GPU host, from the repo root (after `npm run build`):  bash scripts/gpu-chamfer.sh [shape ...]
# Times the CUDA Chamfer operator (forward both directions + CSR backward, host arrays in and out) and
# the naive PyTorch baseline (torch.cdist + square + min both ways + autograd, fp32, CUDA events) in
# the same run, on the issue's H200 shapes; the baseline reports "oom" where the [B, N, M] matrix does
# not fit. Then the GPU tests (CUDA vs CPU: bitwise argmin, distances and CSR gradients).
set -o pipefail
cd "$(dirname "$0")/.."
SHAPES=${*:-"32,8192,8192,3 1,100000,100000,3 1,1000000,1000000,3"}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
args=()
for s in $SHAPES; do args+=(--shape "$s"); done
node dist/src/cli/main.js bench --op chamfer --backend cuda "${args[@]}" --repeats 5 --warmup 1
node --test dist/test/gpu/chamfer.test.js
