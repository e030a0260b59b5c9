# session 8, run 52: final check of main (8-bit TMA dispatched): 8-bit bench rows, two-stage, every GPU suite
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 200 > $R/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),tf:Math.round(o.tflops),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,f16v:o.baseline?o.baseline.variant:undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { echo "== $* $(date +%T)"; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | tee -a $R/bench-8bit.jsonl | J; }
for r in 1 2; do
  E --shape 1,1024,1024,128,10000 --dtype int8
  E --shape 1,1024,1024,128,10000 --dtype fp8
done
E --shape 1,32,128,128,100000 --dtype int8
E --shape 32,32,300,128,10000 --dtype int8
E --shape 32,32,300,128,10000 --dtype fp8
E --shape 1,256,256,128,10000 --dtype int8
E --shape 1,256,256,128,10000 --dtype fp8
kill $SMI
timeout 120 $N dist/bench/two-stage-gpu.js > $R/two-stage.txt 2>&1; head -8 $R/two-stage.txt
OUT=$R timeout 330 bash scripts/gpu-check.sh > $R/gpu-check.log 2>&1
echo "gpu-check rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/gpu-check.log; grep -E "^\s*✖" $R/gpu-check.log | head -20
cd $OUT && tar czf run52.tgz r && rm -rf r
echo "== end $(date +%T)"
