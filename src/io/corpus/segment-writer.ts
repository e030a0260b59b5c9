// SegmentWriter: the bytes of one segment file being written under a temporary name. Token rows stream
// through a write buffer with a CRC per checksum chunk, int8 scales go to a side file, and finish()
// lays out the tail sections and the header and syncs. It knows the file format, not the MANIFEST or
// the lock: CorpusWriter renames the file and publishes it.

import * as fs from 'node:fs';
import { crc32 } from 'node:zlib';
import { MaxsimError } from '../../errors.js';
import { type DType, dtypeSize } from '../../tensor.js';
import { bytesOf, step, writeAll } from './files.js';
import { alignUp, CHECKSUM_CHUNK, encodeHeader, HEADER_BYTES, WRITE_BUFFER } from './format.js';

/** What a finished segment file is, as the MANIFEST names it. */
export interface FinishedSegment {
  /** The file's length in bytes. */
  bytes: number;
  /** The CRC stored in the header (byte 124). */
  headerCrc: number;
}

export class SegmentWriter {
  private fd: number | undefined;
  private scalesFd: number | undefined;
  private readonly buffer = new Uint8Array(WRITE_BUFFER);
  private buffered = 0;
  private position = HEADER_BYTES;
  private scalesPosition = 0;
  private readonly chunkCrcs: number[] = [];
  private chunkCrc = 0;
  private chunkFill = 0;
  private scalesCrc = 0;
  // token offsets of the documents so far, [documents + 1], in a typed array grown by doubling
  private offsets = new Float64Array(1024);
  private documentCount = 0;
  private readonly ids: string[] = [];
  private tokenCount = 0;
  private longest = 0;

  /** Creates `tmpFile` (and, for int8, the side file `scalesFile`); both must not exist. */
  constructor(
    readonly tmpFile: string,
    private readonly scalesFile: string,
    private readonly dtype: DType,
    private readonly dim: number,
    private readonly hasIds: boolean,
  ) {
    step('open-segment');
    this.fd = fs.openSync(tmpFile, 'wx');
    if (dtype === 'int8') this.scalesFd = fs.openSync(scalesFile, 'wx+');
  }

  /** Documents ended so far. */
  get documents(): number {
    return this.documentCount;
  }
  /** Token rows written so far. */
  get tokens(): number {
    return this.tokenCount;
  }
  /** The longest document so far, in tokens. */
  get maxLength(): number {
    return this.longest;
  }

  /** Ends a document of `length` token rows (written before with writeTokens), with its id if any. */
  endDocument(length: number, id: string | undefined): void {
    this.tokenCount += length;
    if (this.documentCount + 2 > this.offsets.length) {
      const grown = new Float64Array(this.offsets.length * 2);
      grown.set(this.offsets);
      this.offsets = grown;
    }
    this.offsets[++this.documentCount] = this.tokenCount;
    if (length > this.longest) this.longest = length;
    if (id !== undefined) this.ids.push(id);
  }

  // Token bytes go through a write buffer; checksums are taken per CHECKSUM_CHUNK of the section.
  writeTokens(bytes: Uint8Array): void {
    let at = 0;
    while (at < bytes.length) {
      const take = Math.min(bytes.length - at, CHECKSUM_CHUNK - this.chunkFill, WRITE_BUFFER - this.buffered);
      const part = bytes.subarray(at, at + take);
      this.buffer.set(part, this.buffered);
      this.buffered += take;
      this.chunkCrc = crc32(part, this.chunkCrc);
      this.chunkFill += take;
      at += take;
      if (this.chunkFill === CHECKSUM_CHUNK) {
        this.chunkCrcs.push(this.chunkCrc);
        this.chunkCrc = 0;
        this.chunkFill = 0;
      }
      if (this.buffered === WRITE_BUFFER) this.flush();
    }
  }

  /** int8 corpora: the scales of the token rows just written. */
  writeScales(scales: Float32Array): void {
    const bytes = bytesOf(scales);
    step('write-scales');
    writeAll(this.scalesFd!, bytes, this.scalesPosition);
    this.scalesPosition += bytes.length;
    this.scalesCrc = crc32(bytes, this.scalesCrc);
  }

  /** Writes the tail sections and the header, syncs and closes the file (still under its temporary name). */
  finish(): FinishedSegment {
    this.flush();
    if (this.chunkFill > 0) this.chunkCrcs.push(this.chunkCrc);
    const rowBytes = this.dim * dtypeSize(this.dtype);
    const documents = this.documentCount;
    const tokensSection = { offset: HEADER_BYTES, bytes: this.tokenCount * rowBytes };
    let at = alignUp(HEADER_BYTES + tokensSection.bytes);
    const scalesSection = { offset: at, bytes: this.dtype === 'int8' ? this.tokenCount * 4 : 0 };
    if (this.scalesFd !== undefined) this.copyScales(at);
    at = alignUp(at + scalesSection.bytes);
    const off64 = new BigUint64Array(documents + 1);
    for (let i = 1; i <= documents; i++) off64[i] = BigInt(this.offsets[i]);
    const offsetsBytes = new Uint8Array(off64.buffer);
    const offsetsSection = { offset: at, bytes: offsetsBytes.length };
    step('write-offsets');
    writeAll(this.fd!, offsetsBytes, at);
    at = alignUp(at + offsetsBytes.length);
    const idsBytes = this.hasIds ? this.idsSection() : new Uint8Array(0);
    const idsSection = { offset: at, bytes: idsBytes.length };
    if (idsBytes.length > 0) {
      step('write-ids');
      writeAll(this.fd!, idsBytes, at);
    }
    at = alignUp(at + idsBytes.length);
    const sums = new Uint32Array([...this.chunkCrcs, this.scalesCrc, crc32(offsetsBytes), crc32(idsBytes)]);
    const checksumsSection = { offset: at, bytes: sums.byteLength };
    step('write-checksums');
    writeAll(this.fd!, bytesOf(sums), at);
    const header = encodeHeader({
      dtype: this.dtype,
      dim: this.dim,
      documents,
      tokens: this.tokenCount,
      hasIds: this.hasIds,
      tokensSection,
      scalesSection,
      offsetsSection,
      idsSection,
      checksumsSection,
      chunkBytes: CHECKSUM_CHUNK,
    });
    step('write-header');
    writeAll(this.fd!, header, 0);
    step('sync-segment');
    fs.fsyncSync(this.fd!);
    fs.closeSync(this.fd!);
    this.fd = undefined;
    return { bytes: at + sums.byteLength, headerCrc: new DataView(header.buffer).getUint32(124, true) };
  }

  /**
   * Closes the files and removes the scales side file, and the segment too when `removeSegment` (an
   * abort; after a rename it is no longer there). Best effort: leftovers are removed by the next writer.
   */
  close(removeSegment: boolean): void {
    for (const fd of [this.fd, this.scalesFd]) {
      if (fd === undefined) continue;
      try {
        fs.closeSync(fd);
      } catch {
        // already closed
      }
    }
    this.fd = this.scalesFd = undefined;
    try {
      fs.rmSync(this.scalesFile, { force: true });
      if (removeSegment) fs.rmSync(this.tmpFile, { force: true });
    } catch {
      // best effort: leftovers are removed by the next writer
    }
  }

  // uint64 [documents + 1] byte offsets, then the UTF-8 ids back to back.
  private idsSection(): Uint8Array {
    const text = this.ids.map((s) => Buffer.from(s, 'utf8'));
    const starts = new BigUint64Array(this.documentCount + 1);
    let o = 0;
    text.forEach((t, i) => {
      o += t.length;
      starts[i + 1] = BigInt(o);
    });
    return Buffer.concat([Buffer.from(starts.buffer), ...text]);
  }

  private flush() {
    if (this.buffered === 0) return;
    step('write-tokens');
    writeAll(this.fd!, this.buffer.subarray(0, this.buffered), this.position);
    this.position += this.buffered;
    this.buffered = 0;
  }

  // int8: the scales went to a side file while tokens streamed; copy them into their section.
  private copyScales(at: number) {
    const chunk = new Uint8Array(WRITE_BUFFER);
    for (let done = 0; done < this.scalesPosition; ) {
      const n = fs.readSync(
        this.scalesFd!,
        chunk,
        0,
        Math.min(chunk.length, this.scalesPosition - done),
        done,
      );
      if (n === 0) throw new MaxsimError(`${this.scalesFile} shrank while the segment was written`);
      step('write-scales');
      writeAll(this.fd!, chunk.subarray(0, n), at + done);
      done += n;
    }
  }
}
