# session 8, run 55: where the two-stage job's fixed cost goes (MAXSIM_JOB_PHASES=1: a synchronize at each phase boundary)
set -u
gunzip -kf .gpu/node.gz && chmod +x .gpu/node
N=$PWD/.gpu/node
timeout 100 $N dist/bench/two-stage-gpu.js > $OUT/two-stage-plain.txt 2>&1; head -4 $OUT/two-stage-plain.txt
MAXSIM_JOB_PHASES=1 timeout 100 $N dist/bench/two-stage-gpu.js > $OUT/two-stage-phases.txt 2> $OUT/phases.txt; head -4 $OUT/two-stage-phases.txt
for job in topK twoStage; do
  grep "^$job phases" $OUT/phases.txt | tail -40 | $N -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>{const acc={};for(const l of s.trim().split("\n")){const t=l.split(":")[1].trim().split(" ");for(let i=0;i<t.length;i+=2)(acc[t[i]]??=[]).push(+t[i+1]);}const med=a=>a.sort((x,y)=>x-y)[a.length>>1];console.log(process.argv[1],Object.entries(acc).map(([k,v])=>k+" "+med(v).toFixed(3)).join("  "))})' $job
done
