# session 9, run 57: the bit-pattern row max (max3_bits) in the 8-bit and fp16 wgmma folds: SASS opcode
# counts, every GPU suite (sign-run tests new), one A/B round at ColPali against HEAD's fatbins (kernels-old)
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
echo "== start $(date +%T)"
for f in int8 fp8 wgmma; do for d in kernels kernels-old; do
  cuobjdump -sass build/$d/maxsim_$f.fatbin > $R/sass.txt 2>&1
  echo "-- $f $d"; python3 .gpu/sass_hist.py $R/sass.txt tma_w2m2n128 tma_w2m2n64 | tee -a $R/sass-counts.txt
done; done; rm -f $R/sass.txt
echo "== gpu-check $(date +%T)"
OUT=$R timeout 300 bash scripts/gpu-check.sh > $R/gpu-check.log 2>&1
echo "gpu-check rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/gpu-check.log; grep -E "^\s*✖" $R/gpu-check.log | head -20
grep -E "sign runs|best match" $R/gpu-check.log | head -12
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 250 > $R/power-smi.csv 2>&1 &
SMI=$!
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),tf:Math.round(o.tflops),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { local k=$1; shift; echo "== $k $* $(date +%T)"; if [ $k = old ]; then export MAXSIM_KERNEL_DIR=$PWD/build/kernels-old; else unset MAXSIM_KERNEL_DIR; fi
  timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | sed "s/^{/{\"kernels\":\"$k\",/" | tee -a $R/ab-max3.jsonl | J; }
for k in new old; do
  E $k --shape 1,1024,1024,128,10000 --dtype int8
  E $k --shape 1,1024,1024,128,10000 --dtype fp8
done
for k in old new; do
  E $k --shape 32,32,300,128,10000 --dtype int8
  E $k --shape 32,32,300,128,10000 --dtype fp8
done
kill $SMI
cd $OUT && tar czf run57.tgz r && rm -rf r
echo "== end $(date +%T)"
