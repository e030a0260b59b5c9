set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $OUT/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),tf:Math.round(o.tflops),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,f16v:o.baseline?o.baseline.variant:undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { echo "== $* $(date +%T)"; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$OUT/bench.err | tee -a $OUT/bench-8bit.jsonl | J; }
E --shape 1,1024,1024,128,10000 --dtype int8
E --shape 1,1024,1024,128,10000 --dtype fp8
E --shape 1,32,128,128,100000 --dtype int8
E --shape 32,32,300,128,10000 --dtype int8
E --shape 32,32,300,128,10000 --dtype int8 --variant maxsim_int8_wgmma_w3m2n64
E --shape 32,32,300,128,10000 --dtype fp8
E --shape 1,256,256,128,10000 --dtype int8
E --shape 1,256,256,128,10000 --dtype fp8
E --shape 1,1024,1024,128,10000 --dtype int8
E --shape 1,1024,1024,128,10000 --dtype fp8
kill $SMI
for i in 1 2; do timeout 120 $N dist/bench/two-stage-gpu.js > $OUT/two-stage-$i.txt 2>&1; head -6 $OUT/two-stage-$i.txt; done
OUT=$OUT timeout 300 bash scripts/gpu-check.sh > $OUT/gpu-check.log 2>&1
echo "gpu-check rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $OUT/gpu-check.log; grep -E "^\s*✖" $OUT/gpu-check.log | head -20
