# session 9, run 60: final check of the committed fold (bit-pattern row max, one chain, fp8 + fp16/bf16; int8 unchanged):
# every GPU suite, the 8-bit rows, fp16 rows against HEAD e19024b's fatbins (old), two-stage
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
rm -rf build/k-old; cp -r build/kernels build/k-old; cp .gpu/old/*.fatbin build/k-old/
echo "== gpu-check $(date +%T)"
OUT=$R timeout 300 bash scripts/gpu-check.sh > $R/gpu-check.log 2>&1
echo "gpu-check rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/gpu-check.log; grep -E "^\s*✖" $R/gpu-check.log | head -20
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $R/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({k:o.kernels,shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { local k=$1; shift; if [ $k = new ]; then unset MAXSIM_KERNEL_DIR; else export MAXSIM_KERNEL_DIR=$PWD/build/k-$k; fi
  timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | sed "s/^{/{\"kernels\":\"$k\",/" | tee -a $R/bench-final.jsonl | J; }
echo "== bench $(date +%T)"
for r in 1 2 3; do E new --shape 1,1024,1024,128,10000 --dtype int8; E new --shape 1,1024,1024,128,10000 --dtype fp8; done
E new --shape 1,32,128,128,100000 --dtype int8
for k in int8 fp8; do E new --shape 32,32,300,128,10000 --dtype $k; E new --shape 1,256,256,128,10000 --dtype $k; done
for r in 1 2; do for k in new old; do E $k --shape 1,128,300,128,100000 --dtype float16; E $k --shape 1,64,300,128,100000 --dtype float16; done; done
for k in new old; do E $k --shape 1,1024,1024,128,1000 --dtype float16; E $k --shape 32,32,300,128,10000 --dtype float16; done
kill $SMI
timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage.txt 2>&1; head -8 $R/two-stage.txt
cd $OUT && tar czf run60.tgz r && rm -rf r
echo "== end $(date +%T)"
