// One open CUDA device (CudaDevice): uploads, memory, and the plans of its corpora. Moved out of
// cuda.ts unchanged.
import { BackendUnavailableError, InvalidArgumentError } from '../errors.js';
import { hasDocumentScales } from '../ops/quantize.js';
import { type DType, isTokenBatch, type TokenBatch, type TokenMatrix } from '../tensor.js';
import type { BenchOptions, CudaDevice, DeviceCorpus, ScoreOptions } from './cuda.js';
import { Corpus } from './cuda-corpus.js';
import {
  type DeviceCaps,
  deviceCaps,
  dispatchTable,
  type Launch,
  launchFor,
  type Problem,
  selectVariant,
  type Variant,
} from './cuda-dispatch.js';
import {
  asQueryBatch,
  batchMean,
  type CachedPlan,
  type CorpusShape,
  describe,
  jobQueries,
  maxLength,
  shapeOf,
  toDtype,
} from './cuda-input.js';
import {
  type BenchResult,
  type CudaDeviceInfo,
  type CudaMemory,
  type NativeDevice,
  type NativeLaunch,
  type NativeTokenSet,
  nativeCuda,
} from './cuda-native.js';
import { planSelect, type SelectShape, type SelectWhere, smallSelection } from './cuda-select-plan.js';

export class Device implements CudaDevice {
  private readonly corpora = new Set<WeakRef<Corpus>>();
  private disposed = false;
  readonly caps: DeviceCaps;

  constructor(
    readonly handle: NativeDevice,
    readonly info: CudaDeviceInfo,
  ) {
    this.caps = deviceCaps(info);
    this.kernels = new Set(info.kernels);
  }

  /** Entry points in the loaded fatbins (empty when the driver cannot list them). */
  private readonly kernels: ReadonlySet<string>;

  check() {
    if (this.disposed)
      throw new InvalidArgumentError(
        'device',
        'a live CudaDevice',
        'one that was disposed (dispose() was called)',
      );
  }

  /** A corpus for a token set this device made (tracked, so dispose() of the device frees it). */
  adopt(native: NativeTokenSet, documentScales = false, mean?: Float32Array): Corpus {
    return this.track(native, documentScales, mean);
  }

  private track(native: NativeTokenSet, documentScales = false, mean?: Float32Array): Corpus {
    const c = new Corpus(this, native, documentScales, mean);
    for (const r of this.corpora) if (!r.deref() || r.deref()?.disposed) this.corpora.delete(r);
    this.corpora.add(new WeakRef(c));
    return c;
  }

  async upload(batch: TokenBatch): Promise<DeviceCorpus> {
    this.check();
    if (!isTokenBatch(batch))
      throw new InvalidArgumentError('batch', 'a TokenBatch (denseBatch or raggedBatch)', describe(batch));
    const mean = batchMean(batch);
    return this.track(await nativeCuda().upload(this.handle, batch), hasDocumentScales(batch), mean);
  }

  async alloc(spec: { dtype: DType; dim: number; tokens: number; items: number }): Promise<DeviceCorpus> {
    this.check();
    // an empty int8 corpus has document scales until a batch without them is appended
    return this.track(await nativeCuda().alloc(this.handle, spec), spec?.dtype === 'int8');
  }

  memory(): Promise<CudaMemory> {
    this.check();
    return nativeCuda().memory(this.handle);
  }

  emptyCache(): Promise<CudaMemory> {
    this.check();
    return nativeCuda().emptyCache(this.handle);
  }

  /** Where a selection of a job on this device runs (cuda-select-plan.ts): small ones on the host. */
  selectFor(shape: SelectShape): SelectWhere {
    if (smallSelection(shape)) return 'host';
    const limits = nativeCuda().selectKernelInfo;
    if (typeof limits !== 'object' || limits === null)
      throw new BackendUnavailableError(
        'the native addon reports no selection limits (cuda.selectKernelInfo; it predates them); reinstall maxsim or rebuild it: `node node_modules/maxsim/scripts/build-native.mjs`',
      );
    return planSelect(shape, limits, this.kernels);
  }

  // planCached's plans by shape: a plan is a pure function of the problem (the device's caps, table
  // and kernels are fixed), so a repeated shape, which is what a server sees, skips the rules.
  private readonly plans = new Map<string, CachedPlan>();

  /**
   * planFor, cached by the problem's shape (for the jobs, which only read the launch: the cached
   * objects are never handed to the caller of plan()), with the launch parsed once by the addon.
   */
  planCached(q: TokenBatch, corpus: CorpusShape, options: ScoreOptions): CachedPlan {
    const key = `${q.count} ${maxLength(q)} ${corpus.maxLength} ${corpus.dim} ${corpus.count} ${corpus.tokens} ${corpus.dtype} ${corpus.documentScales === true} ${options.variant}`;
    let plan = this.plans.get(key);
    if (!plan) {
      const p = this.planFor(q, corpus, options);
      plan = { ...p, handle: nativeCuda().launchHandle?.(p.launch as NativeLaunch) ?? p.launch };
      if (this.plans.size >= 256) this.plans.clear(); // shapes vary without bound (corpora grow): keep few
      this.plans.set(key, plan);
    }
    return plan;
  }

  planFor(q: TokenBatch, corpus: CorpusShape, options: ScoreOptions): { variant: Variant; launch: Launch } {
    const problem: Problem = {
      numQueries: q.count,
      maxQueryLength: maxLength(q),
      maxDocLength: corpus.maxLength,
      dim: corpus.dim,
      numDocs: corpus.count,
      docTokens: corpus.tokens,
      dtype: corpus.dtype,
      documentScales: corpus.documentScales === true,
    };
    const variant = selectVariant(problem, this.caps, options.variant, dispatchTable(), this.kernels);
    return { variant, launch: launchFor(variant, problem, this.caps) };
  }

  plan(queries: TokenMatrix | TokenBatch, corpus: DeviceCorpus, options: ScoreOptions = {}) {
    return this.planFor(jobQueries(asQueryBatch(queries), corpus.dtype, corpus.dim), corpus, options);
  }

  async benchLaunches(
    queries: TokenMatrix | TokenBatch,
    corpus: DeviceCorpus,
    options: BenchOptions = {},
  ): Promise<BenchResult & { variant: string; launch: Launch }> {
    this.check();
    const q = toDtype(asQueryBatch(queries), corpus.dtype, corpus.dim);
    const rotate = options.rotate ?? [];
    // Plan for the largest doc set of the rotation so the grid covers every launch.
    let widest = corpus;
    for (const r of rotate) if (r.count > widest.count || r.maxLength > widest.maxLength) widest = r;
    // the document-scale kernels only when every set of the rotation has document scales
    const documentScales = [corpus, ...rotate].every((c) => c.documentScales);
    const { variant, launch } = this.planFor(q, { ...shapeOf(widest), documentScales }, options);
    const r = await nativeCuda().internal.bench(this.handle, q, corpus.native, launch, {
      warmup: options.warmup,
      warmupMs: options.warmupMs,
      iters: options.iters,
      rotate: rotate.map((c) => c.native),
    });
    return { ...r, variant: variant.name, launch };
  }

  dispose(): void {
    if (this.disposed) return;
    this.disposed = true;
    for (const r of this.corpora) r.deref()?.dispose();
    this.corpora.clear();
  }
}
