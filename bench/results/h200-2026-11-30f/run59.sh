# session 9, run 59: why int8 got slower with max3_bits: ncu pipes of int8/fp8 new vs old (ColPali 2000), and an
# inexact timing-only int8 fold (IADD + FFMA instead of I2FP + FMUL; .gpu/kffma) against new and old
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
R=$OUT/r; mkdir -p $R
for k in old kffma; do rm -rf build/k-$k; cp -r build/kernels build/k-$k; cp .gpu/$k/*.fatbin build/k-$k/; done
echo "== start $(date +%T)"
for k in int8 fp8; do for kk in new old; do
  if [ $kk = new ]; then unset MAXSIM_KERNEL_DIR; else export MAXSIM_KERNEL_DIR=$PWD/build/k-$kk; fi
  timeout 100 ncu --clock-control none -k regex:maxsim_${k}_wgmma_tma_w2m2n128 --launch-skip 1 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section SchedulerStats -o $R/ncu-$k-$kk $N dist/src/cli/main.js bench --backend cuda --no-torch --repeats 2 --warmup 1 --shape 1,1024,1024,128,2000 --dtype $k > $R/ncu-$k-$kk-run.txt 2>&1
  echo "$k $kk ncu rc=$?"
  ncu -i $R/ncu-$k-$kk.ncu-rep --page details > $R/ncu-$k-$kk.txt 2>&1
  ncu -i $R/ncu-$k-$kk.ncu-rep --page raw --csv > $R/ncu-$k-$kk-raw.csv 2>&1
  grep -E "Duration|Issue Slots Busy|No Eligible|Executed Ipc A" $R/ncu-$k-$kk.txt | head -5
  rm -f $R/ncu-$k-$kk.ncu-rep
done; done
unset MAXSIM_KERNEL_DIR
J() { $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{for(const l of s.trim().split("\n")){try{const o=JSON.parse(l);console.log(JSON.stringify({k:o.kernels,shape:o.shape,dtype:o.dtype,v:o.variant,ms:+o.ms.toFixed(3),min:+o.msMin.toFixed(3),f16:o.baseline?+o.baseline.ms.toFixed(3):undefined,ratio:o.speedupVsBaseline?+o.speedupVsBaseline.toFixed(3):undefined,err:o.maxRelErr.toExponential(1)}))}catch(e){console.log(l.slice(0,200))}}})'; }
E() { local k=$1; shift; if [ $k = new ]; then unset MAXSIM_KERNEL_DIR; else export MAXSIM_KERNEL_DIR=$PWD/build/k-$k; fi
  timeout 60 $N dist/src/cli/main.js bench --backend cuda --json --no-torch "$@" 2>>$R/bench.err | sed "s/^{/{\"kernels\":\"$k\",/" | tee -a $R/ab-ffma.jsonl | J; }
echo "== bench $(date +%T)"
for r in 1 2; do for k in kffma new old; do
  E $k --shape 1,1024,1024,128,10000 --dtype int8
done; done
for k in kffma new old; do E $k --shape 32,32,300,128,10000 --dtype int8; done
for r in 1 2; do for k in new old; do E $k --shape 1,128,300,128,100000 --dtype float16; done; done
cd $OUT && tar czf run59.tgz r && rm -rf r
echo "== end $(date +%T)"
