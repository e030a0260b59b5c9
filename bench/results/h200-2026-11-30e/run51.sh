# session 8, run 51: 8-bit wgmma with the last-arriving consumer warp combining (no per-document barrier); A/B against HEAD's fatbins
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $R/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),tf:Math.round(o.tflops),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { tag=$1; shift; echo "== $tag $* $(date +%T)"; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --repeats 20 --warmup 3 "$@" 2>>$R/bench.err | sed "s/^{/{\"tag\":\"$tag\",/" | tee -a $R/ab-last-arriver.jsonl | J; }
echo "== tests $(date +%T)"
MAXSIM_TEST_SEED=$RANDOM timeout 240 $N --test --test-reporter=spec dist/test/gpu/int8.test.js dist/test/gpu/two-stage.test.js > $R/gpu-tests-last-arriver.log 2>&1
echo "rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/gpu-tests-last-arriver.log; grep -E "^\s*✖" $R/gpu-tests-last-arriver.log | head
for r in 1 2 3; do
  for k in int8 fp8; do
    E new --shape 1,1024,1024,128,10000 --dtype $k
    MAXSIM_KERNEL_DIR=$PWD/build/kernels-old E old --shape 1,1024,1024,128,10000 --dtype $k
  done
done
for r in 1 2; do for k in int8 fp8; do for sh in 32,32,300,128,10000 1,256,256,128,10000; do
  E new --shape $sh --dtype $k
  MAXSIM_KERNEL_DIR=$PWD/build/kernels-old E old --shape $sh --dtype $k
done; done; done
kill $SMI
cd $OUT && tar czf run51.tgz r && rm -rf r
echo "== end $(date +%T)"
