#!/bin/bash
# Build the kernel fatbins on the development machine (nvcc 13.0, no GPU needed).
set -e
cd "$(dirname "$0")"
K=../../native/cuda/kernels
mkdir -p out
FLAGS="-fatbin -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90a,code=sm_90a -gencode arch=compute_90a,code=compute_90a -lineinfo -Xptxas -warn-spills -O3 -std=c++17"
for f in maxsim_simt maxsim_mma maxsim_wgmma; do
  nvcc $FLAGS -Xptxas -v $K/$f.cu -o out/$f.fatbin 2> out/$f.ptxas.txt
  grep -E "spill stores" out/$f.ptxas.txt | sort | uniq -c
done
ls -la out
