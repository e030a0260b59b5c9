// What this installation can do: version, backends, the CPU kernel set, and why CUDA is unavailable.
import { type CpuInfo, cpuInfo, cpuUnavailableReason } from './backends/cpu.js';
import { cudaUnavailableReason } from './backends/select.js';
import { loadNative } from './native.js';
import { version } from './version.js';

export interface MaxsimInfo {
  version: string;
  node: string;
  backends: { cpu: boolean; cuda: boolean };
  cpu?: CpuInfo;
  cpuUnavailable?: string;
  cuda?: unknown;
  cudaUnavailable?: string;
}

export function info(): MaxsimInfo {
  const cpuReason = cpuUnavailableReason();
  const cudaReason = cudaUnavailableReason();
  const out: MaxsimInfo = {
    version,
    node: process.version,
    backends: { cpu: !cpuReason, cuda: !cudaReason },
  };
  if (cpuReason) out.cpuUnavailable = cpuReason;
  else out.cpu = cpuInfo();
  if (cudaReason) out.cudaUnavailable = cudaReason;
  else out.cuda = (loadNative().cuda.status as unknown as () => unknown)();
  return out;
}
