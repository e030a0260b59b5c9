# session 8, run 50: 8-bit TMA twins with the scales by cp.async (branch wip-8bit-exp): GPU suites, A/B, dispatch
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $R/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),tf:Math.round(o.tflops),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { echo "== $* $(date +%T)"; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --repeats 20 --warmup 3 "$@" 2>>$R/bench.err | tee -a $R/ab-8bit-tma.jsonl | J; }
for k in int8 fp8; do timeout 60 $N .gpu/probe.mjs maxsim_${k}_wgmma_tma_w2m2n128 int8 16,128 > $R/probe-$k.txt 2>&1; echo "probe $k rc=$?"; done
echo "== tests $(date +%T)"
MAXSIM_TEST_SEED=$RANDOM timeout 240 $N --test --test-reporter=spec dist/test/gpu/int8.test.js dist/test/gpu/two-stage.test.js dist/test/gpu/lifecycle.test.js dist/test/gpu/dispatch.test.js > $R/gpu-tests-8bit-tma.log 2>&1
echo "rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/gpu-tests-8bit-tma.log; grep -E "^\s*✖" $R/gpu-tests-8bit-tma.log | head
for r in 1 2 3; do
  for k in int8 fp8; do
    E --shape 1,1024,1024,128,10000 --dtype $k
    E --shape 1,1024,1024,128,10000 --dtype $k --variant maxsim_${k}_wgmma_w2m2n128
  done
done
for k in int8 fp8; do
  E --shape 32,32,300,128,10000 --dtype $k
  E --shape 32,32,300,128,10000 --dtype $k --variant maxsim_${k}_wgmma_w3m2n64
  E --shape 1,256,256,128,10000 --dtype $k
  E --shape 1,256,256,128,10000 --dtype $k --variant maxsim_${k}_wgmma_w2m2n64
done
kill $SMI
cd $OUT && tar czf run50.tgz r && rm -rf r
echo "== end $(date +%T)"
