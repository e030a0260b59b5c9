// Which of the wasm engine's two modules a runtime takes: maxsim-relaxed.wasm (f32x4.relaxed_madd,
// a fused multiply-add where the CPU has one; docs/platforms.md has the speeds) where relaxed SIMD
// validates (V8 11.4+: Chrome 114+, Node 22+), else maxsim.wasm (SIMD128 alone).
// No Node built-ins: shared by src/backends/wasm.ts and src/browser.

/** The two builds of native/wasm. */
export type WasmFlavor = 'relaxed-simd' | 'simd128';

// A module of one function (v128, v128, v128) -> v128 whose body is f32x4.relaxed_madd (0xfd 0x105).
// biome-ignore format: one line per section
const RELAXED_PROBE = new Uint8Array([
  0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version 1
  0x01, 0x08, 0x01, 0x60, 0x03, 0x7b, 0x7b, 0x7b, 0x01, 0x7b, // type: (v128 v128 v128) -> v128
  0x03, 0x02, 0x01, 0x00, // function 0 has type 0
  0x0a, 0x0d, 0x01, 0x0b, 0x00, 0x20, 0x00, 0x20, 0x01, 0x20, 0x02, 0xfd, 0x85, 0x02, 0x0b, // code
]);

/** The flavor this runtime validates (relaxed SIMD where it can). Never throws. */
export function supportedFlavor(): WasmFlavor {
  try {
    return WebAssembly.validate(RELAXED_PROBE) ? 'relaxed-simd' : 'simd128';
  } catch {
    return 'simd128';
  }
}

/** File name of a flavor's module under native/wasm. */
export function flavorFile(flavor: WasmFlavor): string {
  return flavor === 'relaxed-simd' ? 'maxsim-relaxed.wasm' : 'maxsim.wasm';
}
