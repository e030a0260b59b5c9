# session 10, run 67: two A/Bs against main's fatbins, interleaved, one process each.
# (a) cer = branch wip-combine-early-read (item 34's combine read alone; per-token 8-bit and fp16 kernels):
#     ColPali int8/fp8 x3, all pairs int8/fp8 x2, float16 1,128,300 and ColPali x1.
# (b) fmax = fp8 document-scale twins folding with fmaxf (no bit-pattern max, no redo): ColPali, all pairs x2.
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
for k in cer fmax; do rm -rf build/k-$k; cp -r build/kernels build/k-$k; cp .gpu/$k/*.fatbin build/k-$k/; done
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({k:o.kernels,sc:o.scales??"token",shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,err:o.maxRelErr}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { local k=$1; shift; if [ $k = main ]; then unset MAXSIM_KERNEL_DIR; else export MAXSIM_KERNEL_DIR=$PWD/build/k-$k; fi
  timeout 90 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | sed "s/^{/{\"kernels\":\"$k\",/" | tee -a $R/ab.jsonl | J; }
for r in 1 2 3; do for k in main cer; do
  E $k --shape 1,1024,1024,128,10000 --dtype int8
  E $k --shape 1,1024,1024,128,10000 --dtype fp8
done; done
for r in 1 2; do for k in main cer; do
  E $k --shape 32,32,300,128,10000 --dtype int8
  E $k --shape 32,32,300,128,10000 --dtype fp8
done; done
for k in main cer; do E $k --shape 1,128,300,128,100000 --dtype f16; E $k --shape 1,1024,1024,128,10000 --dtype f16; done
for r in 1 2; do for k in main fmax; do
  E $k --shape 1,1024,1024,128,10000 --dtype fp8 --scales document
  E $k --shape 32,32,300,128,10000 --dtype fp8 --scales document
done; done
cd $OUT && tar czf run67.tgz r && rm -rf r
