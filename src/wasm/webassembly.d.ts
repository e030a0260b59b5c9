// The part of the WebAssembly JS API the wasm engine uses. tsconfig's lib is ES2022 without DOM
// and @types/node 20 declares none of it; every runtime maxsim supports (Node >= 20, browsers) has it.
declare namespace WebAssembly {
  interface Memory {
    readonly buffer: ArrayBuffer;
  }
  interface Instance {
    readonly exports: Record<string, unknown>;
  }
  interface Module {
    readonly __module?: never;
  }
  interface WebAssemblyInstantiatedSource {
    instance: Instance;
    module: Module;
  }
  var Module: {
    new (bytes: ArrayBufferView | ArrayBuffer): Module;
    exports(module: Module): { name: string; kind: string }[];
  };
  var Instance: {
    new (module: Module, imports?: object): Instance;
  };
  function validate(bytes: ArrayBufferView | ArrayBuffer): boolean;
  function compile(bytes: ArrayBufferView | ArrayBuffer): Promise<Module>;
  function instantiate(
    bytes: ArrayBufferView | ArrayBuffer,
    imports?: object,
  ): Promise<WebAssemblyInstantiatedSource>;
  function instantiate(module: Module, imports?: object): Promise<Instance>;
}
