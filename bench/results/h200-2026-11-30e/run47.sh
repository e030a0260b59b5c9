# session 8, run 47: 8-bit TMA twins and w3m1n128 (branch wip-8bit-exp): SASS, int8 suite, ColPali A/B, ncu pipes
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $OUT/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),tf:Math.round(o.tflops),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { echo "== $* $(date +%T)"; timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch --repeats 20 --warmup 3 "$@" 2>>$OUT/bench.err | tee -a $OUT/ab-8bit.jsonl | J; }
$N dist/src/cli/main.js info > $OUT/env.log 2>&1; nvidia-smi >> $OUT/env.log 2>&1; grep -i "tma\|driver" $OUT/env.log | head -3
for k in int8 fp8; do
  for v in w2m2n128 w3m1n128 tma_w2m2n128 tma_w3m1n128; do
    cuobjdump -sass -fun maxsim_${k}_wgmma_$v build/kernels/maxsim_$k.fatbin > $OUT/sass-$k-$v.txt 2>&1
    echo "$k $v: $(grep -cE '^\s+/\*[0-9a-f]+\*/' $OUT/sass-$k-$v.txt) instr"
  done
done
echo "== tests $(date +%T)"
MAXSIM_TEST_SEED=$RANDOM timeout 200 $N --test --test-reporter=spec dist/test/gpu/int8.test.js dist/test/gpu/two-stage.test.js > $OUT/int8-tests.log 2>&1
echo "rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $OUT/int8-tests.log; grep -E "^\s*✖" $OUT/int8-tests.log | head
for r in 1 2; do
  for k in int8 fp8; do
    for v in w2m2n128 tma_w2m2n128 w3m1n128 tma_w3m1n128; do E --shape 1,1024,1024,128,10000 --dtype $k --variant maxsim_${k}_wgmma_$v; done
  done
done
for k in int8 fp8; do for v in w3m2n64 tma_w2m2n64 w2m2n64; do E --shape 32,32,300,128,10000 --dtype $k --variant maxsim_${k}_wgmma_$v; done; done
echo "== ncu $(date +%T)"
for k in int8 fp8; do for v in w2m2n128 w3m1n128; do
  timeout 90 ncu --clock-control none -k regex:maxsim_${k}_wgmma_$v --launch-skip 1 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section InstructionStats -o $OUT/ncu-$k-$v $N dist/src/cli/main.js bench --backend cuda --no-torch --repeats 2 --warmup 1 --shape 1,1024,1024,128,2000 --dtype $k --variant maxsim_${k}_wgmma_$v > $OUT/ncu-$k-$v-run.txt 2>&1
  echo "$k $v ncu rc=$?"
  ncu -i $OUT/ncu-$k-$v.ncu-rep --page details > $OUT/ncu-$k-$v.txt 2>&1
  ncu -i $OUT/ncu-$k-$v.ncu-rep --page raw --csv > $OUT/ncu-$k-$v-raw.csv 2>&1
  grep -E "Duration|Issue Slots Busy|No Eligible|Eligible Warps|Warp Cycles Per Issued" $OUT/ncu-$k-$v.txt | head -6
  rm -f $OUT/ncu-$k-$v.ncu-rep
done; done
kill $SMI
echo "== end $(date +%T)"
