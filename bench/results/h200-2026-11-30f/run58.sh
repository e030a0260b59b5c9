# session 9, run 58: max3_bits with independent chains per row (kMaxChains 4 = build/kernels, 2 = k2) against
# HEAD's fatbins (old): SASS counts, the 8-bit suite and the sign-run tests, 3 interleaved ColPali rounds, all pairs, fp16 rows
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
for k in old k2; do rm -rf build/k-$k; cp -r build/kernels build/k-$k; cp .gpu/$k/*.fatbin build/k-$k/; done
echo "== start $(date +%T)"
for f in int8 fp8 wgmma; do
  cuobjdump -sass build/kernels/maxsim_$f.fatbin > $R/sass-$f.txt 2>&1
  echo "-- $f chains4"; python3 .gpu/sass_hist.py $R/sass-$f.txt tma_w2m2n128 | tee -a $R/sass-counts.txt
done
# the int8 fold's SASS for reading: the sm_90a tma_w2m2n128 function, kept whole
awk '/arch = sm_90a/{a=1} a&&/Function : maxsim_int8_wgmma_tma_w2m2n128$/{f=1} f&&/Function : /&&!/tma_w2m2n128$/{f=0} f' $R/sass-int8.txt > $R/sass-int8-tma-w2m2n128.txt
rm -f $R/sass-int8.txt $R/sass-fp8.txt $R/sass-wgmma.txt
MAXSIM_TEST_SEED=$RANDOM timeout 200 $N --test --test-reporter=spec dist/test/gpu/int8.test.js > $R/gpu-tests-int8.log 2>&1; echo "int8 suite rc=$?"
grep -E "^ℹ (tests|pass|fail|skipped)" $R/gpu-tests-int8.log; grep -E "^\s*✖" $R/gpu-tests-int8.log | head
MAXSIM_TEST_SEED=$RANDOM timeout 100 $N --test --test-reporter=spec --test-name-pattern="best match" dist/test/gpu/correctness.test.js > $R/gpu-tests-signs.log 2>&1; echo "sign tests rc=$?"
grep -E "^ℹ (tests|pass|fail)" $R/gpu-tests-signs.log
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $R/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({k:o.kernels,shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { local k=$1; shift; if [ $k = new ]; then unset MAXSIM_KERNEL_DIR; else export MAXSIM_KERNEL_DIR=$PWD/build/k-$k; fi
  timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | sed "s/^{/{\"kernels\":\"$k\",/" | tee -a $R/ab-chains.jsonl | J; }
echo "== bench $(date +%T)"
for r in 1 2 3; do for k in new k2 old; do
  E $k --shape 1,1024,1024,128,10000 --dtype int8
  E $k --shape 1,1024,1024,128,10000 --dtype fp8
done; done
for k in new k2 old; do
  E $k --shape 32,32,300,128,10000 --dtype int8
  E $k --shape 32,32,300,128,10000 --dtype fp8
done
for k in new old; do
  E $k --shape 32,32,300,128,10000 --dtype float16
  E $k --shape 1,128,300,128,100000 --dtype float16
  E $k --shape 1,256,256,128,10000 --dtype float16
done
kill $SMI
cd $OUT && tar czf run58.tgz r && rm -rf r
echo "== end $(date +%T)"
