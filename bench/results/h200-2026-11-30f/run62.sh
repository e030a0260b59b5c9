# session 9, run 62: the upside of uniform document scales, timing only (.gpu/kx: fp8 without the per-value scale,
# int8 with its max on the raw int32 accumulators; both give wrong scores for per-token scales) against the committed
# kernels; ncu warp states and source counters of the committed fp8 ColPali kernel
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
rm -rf build/k-kx; cp -r build/kernels build/k-kx; cp .gpu/kx/*.fatbin build/k-kx/
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({k:o.kernels,shape:o.shape,dtype:o.dtype,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { local k=$1; shift; if [ $k = new ]; then unset MAXSIM_KERNEL_DIR; else export MAXSIM_KERNEL_DIR=$PWD/build/k-$k; fi
  timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | sed "s/^{/{\"kernels\":\"$k\",/" | tee -a $R/ab-uniform-scales.jsonl | J; }
for r in 1 2; do for k in kx new; do for d in fp8 int8; do E $k --shape 1,1024,1024,128,10000 --dtype $d; done; done; done
for k in kx new; do for d in fp8 int8; do E $k --shape 32,32,300,128,10000 --dtype $d; done; done
unset MAXSIM_KERNEL_DIR
timeout 120 ncu --clock-control none -k regex:maxsim_fp8_wgmma_tma_w2m2n128 --launch-skip 1 --launch-count 1 --section WarpStateStats --section SourceCounters --section SchedulerStats -o $R/ncu-fp8-stalls $N dist/src/cli/main.js bench --backend cuda --no-torch --repeats 2 --warmup 1 --shape 1,1024,1024,128,2000 --dtype fp8 > $R/ncu-run.txt 2>&1
echo "ncu rc=$?"
ncu -i $R/ncu-fp8-stalls.ncu-rep --page details > $R/ncu-fp8-stalls.txt 2>&1
ncu -i $R/ncu-fp8-stalls.ncu-rep --page source --csv --print-source sass > $R/ncu-fp8-source.csv 2>&1
ncu -i $R/ncu-fp8-stalls.ncu-rep --page raw --csv > $R/ncu-fp8-stalls-raw.csv 2>&1
rm -f $R/ncu-fp8-stalls.ncu-rep
grep -E "Warp Cycles|Stall|stall" $R/ncu-fp8-stalls.txt | head -20
cd $OUT && tar czf run62.tgz r && rm -rf r
