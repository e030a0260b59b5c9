// `maxsim info`: what this installation can do.
import { Command } from 'commander';
import type { CudaStatus } from '../backends/cuda.js';
import { info } from '../info.js';
import { version } from '../version.js';

/** The CUDA lines of `maxsim info` (driver, devices, kernels). */
export function describeCuda(status: CudaStatus): string[] {
  const lines: string[] = [];
  if (status.driverVersion !== undefined) {
    const tma =
      status.tensorMaps === undefined ? '' : `, TMA tensor maps: ${status.tensorMaps ? 'yes' : 'no'}`;
    lines.push(
      `driver CUDA ${Math.floor(status.driverVersion / 1000)}.${(status.driverVersion % 1000) / 10}${tma}`,
    );
  }
  for (const device of status.devices ?? []) {
    const [major, minor] = device.computeCapability;
    const gib = (device.totalMemory / 2 ** 30).toFixed(1);
    const peers = device.peers?.length ? `, peer access to ${device.peers.join(', ')}` : '';
    lines.push(
      `device ${device.index}: ${device.name}, sm_${major}${minor}, ${device.sms} SMs, ${gib} GiB${peers}`,
    );
  }
  if (status.kernelDir !== undefined) {
    lines.push(`kernels ${status.kernelDir}: ${(status.kernelFiles ?? []).join(', ') || 'none found'}`);
  }
  // A GPU without kernels: an install from the registry leaves the 19 MB of fatbins out by default.
  if ((status.devices?.length ?? 0) > 0 && (status.kernelFiles ?? []).length === 0) {
    lines.push(`kernels missing: add them with \`npm install @maxsim/cuda-kernels@${version}\``);
  }
  return lines;
}

export function infoCommand(): Command {
  return new Command('info')
    .description('show the version, the available backends, the CPU kernel set and the CUDA devices')
    .option('--json', 'print JSON')
    .action((opts: { json?: boolean }) => {
      const report = info();
      if (opts.json) {
        console.log(JSON.stringify(report, null, 2));
        return;
      }
      console.log(`maxsim ${report.version} (node ${report.node})`);
      const yesNo = (b: boolean) => (b ? 'yes' : 'no');
      console.log(`backends  cpu: ${yesNo(report.backends.cpu)}, cuda: ${yesNo(report.backends.cuda)}`);
      if (report.cpu) {
        const cpu = report.cpu;
        console.log(
          `cpu       kernel set ${cpu.isa} (usable: ${cpu.isas.join(', ')}), ${cpu.lanes} fp32 lanes`,
        );
        console.log(`          threads ${cpu.threads}, features ${cpu.features}`);
        if (report.cpuInt8) {
          const [best, ...rest] = report.cpuInt8.isas;
          const amx = best === 'amx' ? ` (d % 64 == 0; else ${rest[0]})` : '';
          console.log(`          int8 kernel set ${best}${amx} (usable: ${report.cpuInt8.isas.join(', ')})`);
          if (report.cpuInt8.slowerThanFloat32)
            console.log(`          int8 is slower than float32 here: ${report.cpuInt8.slowerThanFloat32}`);
        }
      } else {
        console.log(`cpu       unavailable: ${report.cpuUnavailable}`);
      }
      // the driver and devices are worth showing even when CUDA cannot run (no kernels, say)
      if (report.cudaUnavailable !== undefined)
        console.log(`cuda      unavailable: ${report.cudaUnavailable}`);
      for (const line of describeCuda(report.cuda)) console.log(`cuda      ${line}`);
    });
}
