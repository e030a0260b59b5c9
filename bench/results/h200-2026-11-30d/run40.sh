set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv > $OUT/smi.txt
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),gbs:Math.round(o.gbps||0),tf:Math.round(o.tflops||0),err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
B() { timeout 40 $N dist/src/cli/main.js bench --backend cuda --repeats 40 --warmup 5 --no-torch --json "$@" 2>>$OUT/bench.err | tee -a $OUT/bench.jsonl | J; }
echo "== correctness (all variants, all dtypes)"
MAXSIM_TEST_SEED=$RANDOM timeout 300 $N --test --test-reporter=spec dist/test/gpu/correctness.test.js > $OUT/correctness.log 2>&1
echo "rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $OUT/correctness.log; grep -B3 -m5 "AssertionError\|Error:" $OUT/correctness.log | head -40
echo "== g1 configs"
for r in 1 2; do for v in maxsim_mma_g1_f16 xexp_mma_g1t32_f16 xexp_mma_g1s4_f16 xexp_mma_g1t32s4_f16; do B --shape 1,32,128,128,100000 --variant $v; done; done
for v in maxsim_mma_g1_f16 xexp_mma_g1t32_f16 xexp_mma_g1s4_f16 xexp_mma_g1t32s4_f16; do B --shape 1,32,512,128,100000 --variant $v; done
echo "== TMA"
for r in 1 2; do
for v in maxsim_wgmma_pp_m2n64_f16 maxsim_wgmma_tma_pp_m2n64_f16; do B --shape 1,128,300,128,100000 --variant $v; B --shape 32,32,300,128,10000 --variant $v; done
for v in maxsim_wgmma_w2m2n128_f16 maxsim_wgmma_tma_w2m2n128_f16; do B --shape 1,1024,1024,128,10000 --variant $v; B --shape 1,1024,1024,128,1000 --variant $v; done
done
B --shape 1,256,256,128,10000
B --shape 1,256,256,128,10000 --variant maxsim_wgmma_tma_pp_m2n64_f16
echo "== dispatch + int8 tests"
MAXSIM_TEST_SEED=$RANDOM timeout 120 $N --test --test-reporter=spec dist/test/gpu/dispatch.test.js dist/test/gpu/int8.test.js > $OUT/other.log 2>&1
echo "rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $OUT/other.log; grep -B2 -A3 "✖" $OUT/other.log | head -30
