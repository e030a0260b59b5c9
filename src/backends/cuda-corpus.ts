// A corpus on one CUDA device (DeviceCorpus): scoring, top-k, append, quantize, select. Moved out of
// cuda.ts unchanged.
import { InvalidArgumentError } from '../errors.js';
import { checkCenter, refuseCenteredQueries } from '../ops/center.js';
import { checkScaleGranularity, hasDocumentScales, type QuantizeOptions } from '../ops/quantize.js';
import {
  type Hit,
  isTokenBatch,
  isTokenMatrix,
  raggedBatch,
  type ScoreMatrix,
  type TokenBatch,
  type TokenMatrix,
} from '../tensor.js';
import type { DeviceCorpus, QuantizeMode8, ScoreOptions, TopKOptions } from './cuda.js';
import { quantizeCentered, shiftHits, shiftScores } from './cuda-center.js';
import type { Device } from './cuda-device.js';
import type { DeviceDType } from './cuda-dispatch.js';
import {
  asQueryBatch,
  CENTER_DEFAULT,
  checkCandidates,
  checkSameMean,
  describe,
  jobQueries,
  maxLength,
  rethrowRange,
  shapeOf,
} from './cuda-input.js';
import {
  hitsOfHeaps,
  type JobHandoff,
  jobOptions,
  type NativeHeaps,
  type NativeTokenSet,
  nativeCuda,
  reportPhases,
} from './cuda-native.js';
import { exactGroupFor } from './cuda-two-stage-plan.js';
import type { Fp8Tokens } from './reference-fp8.js';

// The corpus that rescores `scan`'s candidates: one of this module's corpora, on the same device,
// with the same documents (count and dim).
function rescoreCorpus(rescore: { docs: DeviceCorpus }, scan: Corpus): Corpus {
  const docs = rescore?.docs;
  if (!(docs instanceof Corpus))
    throw new InvalidArgumentError('options.rescore.docs', 'a DeviceCorpus', describe(docs));
  if (docs.count !== scan.count || docs.dim !== scan.dim)
    throw new InvalidArgumentError(
      'options.rescore.docs',
      `the same documents as the scanned corpus (${scan.count} of dim ${scan.dim})`,
      `${docs.count} of dim ${docs.dim}`,
    );
  return docs;
}

export class Corpus implements DeviceCorpus {
  // A token set's dim and dtype never change (an append must match them): read once, not through
  // the native getters on every call.
  readonly dim: number;
  readonly dtype: DeviceDType;
  constructor(
    private readonly device: Device,
    readonly native: NativeTokenSet,
    private docScales = false,
    readonly mean: Float32Array | undefined = undefined,
  ) {
    this.dim = native.dim;
    this.dtype = native.dtype;
  }
  get documentScales() {
    return this.docScales;
  }
  get count() {
    return this.native.count;
  }
  get tokens() {
    return this.native.tokens;
  }
  get maxLength() {
    return this.native.maxLength;
  }
  get bytes() {
    return this.native.bytes;
  }
  get disposed() {
    return this.native.disposed;
  }

  score(query: TokenMatrix, options?: ScoreOptions): Promise<Float32Array>;
  score(queries: TokenBatch, options?: ScoreOptions): Promise<ScoreMatrix>;
  async score(
    queries: TokenMatrix | TokenBatch,
    options: ScoreOptions = {},
  ): Promise<Float32Array | ScoreMatrix> {
    const batch = asQueryBatch(queries);
    refuseCenteredQueries(queries, 'queries');
    const data = await this.scoreAll(batch, options);
    if (this.mean) shiftScores(batch, this.mean, data);
    // cols from the result: an append that completed before this call may have grown the corpus
    return isTokenMatrix(queries)
      ? data
      : { data, rows: batch.count, cols: batch.count > 0 ? data.length / batch.count : this.count };
  }

  topK(query: TokenMatrix, k: number, options?: TopKOptions): Promise<Hit[]>;
  topK(queries: TokenBatch, k: number, options?: TopKOptions): Promise<Hit[][]>;
  topK(queries: TokenMatrix | TokenBatch, k: number, options?: TopKOptions): Promise<Hit[] | Hit[][]>;
  async topK(
    queries: TokenMatrix | TokenBatch,
    k: number,
    options: TopKOptions = {},
  ): Promise<Hit[] | Hit[][]> {
    const lists = await this.topKAll(queries, k, options);
    // one query, one list (as the root topK)
    return isTokenMatrix(queries) ? lists[0] : lists;
  }

  private async topKAll(
    queries: TokenMatrix | TokenBatch,
    k: number,
    options: TopKOptions,
  ): Promise<Hit[][]> {
    if (!Number.isInteger(k) || k < 0)
      throw new InvalidArgumentError('k', 'a non-negative integer', String(k));
    const batch = asQueryBatch(queries);
    refuseCenteredQueries(queries, 'queries');
    this.check();
    const q = jobQueries(batch, this.dtype, this.dim, true);
    const rescore = options.rescore;
    const exact = rescore === undefined ? undefined : rescoreCorpus(rescore, this);
    // the selection runs on the GPU (NaN rows and k > 256 on the worker's heaps): k hits per query come back
    const empty = () => Array.from({ length: q.count }, (): Hit[] => []);
    if (!exact) {
      const count = this.count; // one read of the native getter
      if (q.count === 0 || count === 0 || k === 0) return empty();
      const launch = this.device.planCached(q, this, options).handle;
      // planned on k itself, not min(k, count): an append in flight may grow the corpus before the job
      // runs, and the job keeps min(k, its count), which a plan for k (<= count now) still covers
      const select = this.device.selectFor({ rows: q.count, cols: count, keep: k });
      let h: NativeHeaps;
      try {
        h = await nativeCuda().topK(this.device.handle, q, this.native, launch, k, select, jobOptions());
      } catch (e) {
        rethrowRange(e, batch);
      }
      const hits = hitsOfHeaps(reportPhases('topK', h), q.count);
      return this.mean ? shiftHits(batch, this.mean, hits) : hits;
    }
    exact.check();
    const qe = jobQueries(batch, exact.dtype, exact.dim, true);
    const keep = Math.min(this.count, checkCandidates(rescore?.candidates));
    if (q.count === 0 || keep === 0 || k === 0) return empty();
    const scan = this.device.planCached(q, this, options).handle;
    // the exact stage runs in groups of queries (cuda-two-stage-plan.ts), each against a view of its own
    // queries' candidates (or the whole float corpus when that is no more; their union, at most as
    // many, where the host selects): the launch is planned for one group and that many documents,
    // none longer than exact's longest (their total length is unknown here: the rules go by the longest)
    const select = this.device.selectFor({ rows: q.count, cols: this.count, keep });
    const exactShape = shapeOf(exact);
    const longest = maxLength(qe);
    const group = exactGroupFor({
      rows: q.count,
      keep,
      queryLength: longest,
      docLength: exactShape.maxLength,
      dim: exact.dim,
      select,
    });
    const shape = { ...exactShape, count: Math.min(this.count, group * keep), tokens: undefined };
    // the plan reads the count and the longest query: a group's stand-in
    const groupQueries =
      group === q.count ? qe : { ...qe, count: group, lengths: new Int32Array(group).fill(longest) };
    const rescoring = this.device.planCached(groupQueries, shape, {}).handle;
    const spec = { k, candidates: keep, count: this.count, select, exactGroup: group };
    const native = nativeCuda();
    let h: NativeHeaps;
    try {
      h = await native.twoStage(
        this.device.handle,
        q,
        this.native,
        scan,
        qe,
        exact.native,
        rescoring,
        spec,
        jobOptions(),
      );
    } catch (e) {
      rethrowRange(e, batch);
    }
    return hitsOfHeaps(reportPhases('twoStage', h), q.count);
  }

  async append(batch: TokenBatch): Promise<void> {
    this.check();
    if (!isTokenBatch(batch)) throw new InvalidArgumentError('batch', 'a TokenBatch', describe(batch));
    checkSameMean(batch, this.mean);
    // lowered before the copy is queued: a scoring call planned from now on sees the new documents
    if (!hasDocumentScales(batch)) this.docScales = false;
    await nativeCuda().append(this.native, batch);
  }

  async quantize(mode: QuantizeMode8, options: QuantizeOptions = {}): Promise<DeviceCorpus> {
    this.check();
    if (mode !== 'int8' && mode !== 'fp8')
      throw new InvalidArgumentError('mode', "'int8' or 'fp8'", JSON.stringify(mode));
    // fp8 defaults to one scale per document: its ranking fidelity is the same as per token's
    // (top-10 0.944 vs 0.945 on the demo corpus) and its compute-bound kernels run ~1.3x faster
    const scales =
      options?.scales === undefined && mode === 'fp8' ? 'document' : checkScaleGranularity(options?.scales);
    if (this.dtype === 'int8' || this.dtype === 'fp8')
      throw new InvalidArgumentError(
        'corpus.dtype',
        "'float32', 'float16' or 'bfloat16' (a float corpus to quantize)",
        `'${this.dtype}'`,
      );
    const center = checkCenter(options?.center ?? CENTER_DEFAULT, this.dim);
    if (center === false)
      return this.device.adopt(await nativeCuda().quantize(this.native, mode, scales), scales === 'document');
    const made = await quantizeCentered(this, mode, scales, center, {
      upload: (batch) => nativeCuda().upload(this.device.handle, batch),
      quantize: (set, m, s) => nativeCuda().quantize(set, m, s),
    });
    return this.device.adopt(made.native, scales === 'document', made.mean);
  }

  async download(): Promise<TokenBatch | Fp8Tokens> {
    this.check();
    const r = await nativeCuda().download(this.native);
    if (r.dtype === 'fp8') {
      const starts = Float64Array.from({ length: r.count }, (_, i) => r.offsets[i]);
      return {
        kind: 'fp8',
        dim: r.dim,
        count: r.count,
        data: r.data as Uint8Array,
        scales: r.scales as Float32Array,
        starts,
        lengths: r.lengths,
      };
    }
    // a view: the data may hold tokens past the last item (a corpus allocated with spare capacity)
    return raggedBatch(r.data as Float32Array | Uint16Array | Int8Array, r.offsets, {
      dim: r.dim,
      dtype: r.dtype,
      scales: r.scales,
      checkFinite: false,
      view: true,
    });
  }

  async select(indices: ArrayLike<number>): Promise<DeviceCorpus> {
    this.check();
    if (indices === null || typeof indices !== 'object' || typeof indices.length !== 'number')
      throw new InvalidArgumentError('indices', 'an array of document indices', describe(indices));
    const view = await nativeCuda().select(this.native, Float64Array.from(indices));
    return this.device.adopt(view, this.docScales, this.mean);
  }

  dispose(): void {
    this.native.dispose();
  }

  /** A corpus for a token set made on this corpus's device (tracked by it; this one may be disposed). */
  sibling(native: NativeTokenSet): Corpus {
    this.device.check();
    return this.device.adopt(native);
  }

  private check() {
    if (this.native.disposed)
      throw new InvalidArgumentError(
        'corpus',
        'a live DeviceCorpus',
        'one that was disposed (dispose() was called)',
      );
    this.device.check();
  }

  private async scoreAll(batch: TokenBatch, options: ScoreOptions): Promise<Float32Array> {
    this.check();
    const q = jobQueries(batch, this.dtype, this.dim, true);
    if (q.count === 0 || this.count === 0) return new Float32Array(q.count * this.count);
    const launch = this.device.planCached(q, this, options).handle;
    const options_ = jobOptions();
    let scores: Float32Array & { handoff?: JobHandoff };
    try {
      scores = await nativeCuda().score(this.device.handle, q, this.native, launch, options_);
    } catch (e) {
      rethrowRange(e, batch);
    }
    if (!options_) return scores;
    reportPhases('score', scores);
    Reflect.deleteProperty(scores, 'handoff'); // reported; the caller gets the plain array
    return scores;
  }
}
