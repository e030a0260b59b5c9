# session 9, run 64: all pairs again for item 34 (the read-ahead; one process each in run63 gave int8 1.114 vs 1.092):
# three interleaved rounds against HEAD f79e8a5's fatbins (old), int8 and fp8, plus 1,256,256
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
rm -rf build/k-old; cp -r build/kernels build/k-old; cp .gpu/old/*.fatbin build/k-old/
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({k:o.kernels,shape:o.shape,dtype:o.dtype,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { local k=$1; shift; if [ $k = new ]; then unset MAXSIM_KERNEL_DIR; else export MAXSIM_KERNEL_DIR=$PWD/build/k-$k; fi
  timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | sed "s/^{/{\"kernels\":\"$k\",/" | tee -a $R/ab-prefetch-allpairs.jsonl | J; }
for r in 1 2 3; do for k in old new; do E $k --shape 32,32,300,128,10000 --dtype int8; E $k --shape 32,32,300,128,10000 --dtype fp8; done; done
for k in old new; do E $k --shape 1,256,256,128,10000 --dtype int8; E $k --shape 1,256,256,128,10000 --dtype fp8; done
cd $OUT && tar czf run64.tgz r && rm -rf r
