# session 9, run 63: the 8-bit producer reads each document's length and start one document ahead; the combine
# (SliceCombine) reads the carried partial when the document starts, not after the barrier (fp16 and 8-bit):
# every GPU suite, then A/B against HEAD f79e8a5's fatbins (old): ColPali int8/fp8 two rounds, all pairs, fp16 rows
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
rm -rf build/k-old; cp -r build/kernels build/k-old; cp .gpu/old/*.fatbin build/k-old/
OUT=$R timeout 300 bash scripts/gpu-check.sh > $R/gpu-check.log 2>&1
echo "gpu-check rc=$?"; grep -E "^ℹ (tests|pass|fail|skipped)" $R/gpu-check.log; grep -E "^\s*✖" $R/gpu-check.log | head -20
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({k:o.kernels,shape:o.shape,dtype:o.dtype,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { local k=$1; shift; if [ $k = new ]; then unset MAXSIM_KERNEL_DIR; else export MAXSIM_KERNEL_DIR=$PWD/build/k-$k; fi
  timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | sed "s/^{/{\"kernels\":\"$k\",/" | tee -a $R/ab-prefetch.jsonl | J; }
for r in 1 2; do for k in new old; do for d in fp8 int8; do E $k --shape 1,1024,1024,128,10000 --dtype $d; done; done; done
for k in new old; do E $k --shape 32,32,300,128,10000 --dtype int8; E $k --shape 32,32,300,128,10000 --dtype fp8; E $k --shape 1,128,300,128,100000 --dtype float16; done
cd $OUT && tar czf run63.tgz r && rm -rf r
