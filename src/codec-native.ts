// The addon's codecs (native/cpu/codec.h: the server's request scans and decode, the GPU index's
// magnitude check), or undefined where the addon does not load (callers then run their JS loops:
// same results, slower). Loaded once.
import { loadNative, nativeUnavailableReason } from './native.js';

export interface NativeCodec {
  /** Index of the first NaN / infinity (16-bit: bfloat16 when `bf16`, else float16 bits), or -1. */
  firstNonFinite(values: Float32Array | Uint16Array, bf16: boolean): number;
  /** The largest |value|, NaNs ignored (0 when there is none). */
  maxAbs(values: Float32Array): number;
  /** out[at + i] = the float32 value of bits[i] (exact for finite values). */
  decode16(bits: Uint16Array, bf16: boolean, out: Float32Array, at: number): void;
}

let codec: NativeCodec | undefined | null = null;

export function nativeCodec(): NativeCodec | undefined {
  if (codec === null)
    codec =
      nativeUnavailableReason() === undefined
        ? ((loadNative() as unknown as { codec?: NativeCodec }).codec ?? undefined)
        : undefined;
  return codec;
}
