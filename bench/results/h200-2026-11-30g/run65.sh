# session 10, run 65: document scales. The 8-bit GPU tests (new: document-scale quantizers, the DS twins
# against their per-token twins bit for bit and the reference), then ColPali and all pairs with
# --scales token / document, int8 and fp8, interleaved, one process each.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
nvidia-smi > $R/nvidia-smi.txt 2>&1
MAXSIM_TEST_SEED=$RANDOM timeout 300 $N --test --test-reporter=spec dist/test/gpu/int8.test.js dist/test/gpu/dispatch.test.js > $R/gpu-8bit-tests.log 2>&1
echo "tests rc $?"; grep -E "^ℹ (pass|fail)|✖" $R/gpu-8bit-tests.log | head -30
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({sc:o.scales??"token",shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,x:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { timeout 90 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | tee -a $R/bench-scales.jsonl | J; }
for r in 1 2; do for s in token document; do
  E --shape 1,1024,1024,128,10000 --dtype int8 --scales $s
  E --shape 1,1024,1024,128,10000 --dtype fp8 --scales $s
done; done
for s in token document; do
  E --shape 32,32,300,128,10000 --dtype int8 --scales $s
  E --shape 32,32,300,128,10000 --dtype fp8 --scales $s
done
for t in int8 fp8; do cuobjdump -sass build/kernels/maxsim_$t.fatbin > $R/sass-$t.txt 2>&1
  python3 .gpu/sass_hist.py $R/sass-$t.txt tma_ds_w2m2n128 tma_w2m2n128 >> $R/sass-counts.txt 2>&1; gzip $R/sass-$t.txt; done
cat $R/sass-counts.txt
cd $OUT && tar czf run65.tgz r && rm -rf r
