// What this installation can do: version, backends, the CPU kernel set, the CUDA driver and devices
// (or why CUDA is unavailable).
import { type CpuInfo, cpuInfo, cpuUnavailableReason } from './backends/cpu.js';
import { type CudaStatus, cudaStatus } from './backends/cuda-native.js';
import { cudaUnavailableReason } from './backends/select.js';
import { cpuInt8Isas, cpuInt8SlowerReason, type Int8Isa } from './ops/quantize.js';
import { version } from './version.js';

export interface MaxsimInfo {
  version: string;
  node: string;
  backends: { cpu: boolean; cuda: boolean };
  cpu?: CpuInfo;
  /** The int8 x int8 kernel sets usable here, fastest first, and (d = 128) why int8 is slower than float32, if it is. */
  cpuInt8?: { isas: Int8Isa[]; slowerThanFloat32?: string };
  cpuUnavailable?: string;
  /** The CUDA driver, devices and kernel files (`available: false` with the reason when CUDA cannot run). */
  cuda: CudaStatus;
  cudaUnavailable?: string;
}

export function info(): MaxsimInfo {
  const cpuReason = cpuUnavailableReason();
  const cudaReason = cudaUnavailableReason();
  const out: MaxsimInfo = {
    version,
    node: process.version,
    backends: { cpu: !cpuReason, cuda: !cudaReason },
    cuda: cudaStatus(),
  };
  if (cpuReason) out.cpuUnavailable = cpuReason;
  else {
    out.cpu = cpuInfo();
    out.cpuInt8 = { isas: cpuInt8Isas(), slowerThanFloat32: cpuInt8SlowerReason(128) };
  }
  if (cudaReason) out.cudaUnavailable = cudaReason;
  return out;
}
