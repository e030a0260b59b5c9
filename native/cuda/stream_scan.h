// The out-of-core scan: scores queries against a corpus that lives in files (src/io/corpus.ts), block
// by block, with flat device memory. TypeScript plans the blocks and picks the kernel; this executes.
//
// Pipeline (`depth` slots, each a pinned host buffer + a device token set + a score buffer):
//   reader threads   pread() block b's token rows into slot b % depth (each thread a slice of it);
//                    or, in register mode, page-lock block b of the mapped file in place
//                    (cuMemHostRegister, read-only), so the copy engine reads the page cache
//                    directly and no CPU copy happens; or, with direct I/O, pread() with O_DIRECT
//                    (the disk's DMA writes the slot, no page-cache pass); or, with the files
//                    pinned, nothing but checking that the block's pages are registered (pin-ahead:
//                    registering the chunks the block covers, kept for later scans)
//   copy stream      host-to-device copy of the slot, then an event
//   compute stream   waits for that event, runs the MaxSim kernel, copies the [nq, docs] scores back
//   worker thread    (the runtime's) queues the above, then merges the oldest finished block into
//                    the running top-K per query and hands its slot back to the readers
// So reading block b+1, copying block b and scoring block b-1 overlap.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime.h"

namespace maxsim_cuda {

struct StreamBlock {
  int file = 0;               // index into StreamScanSpec::files
  uint64_t tokens_offset = 0; // byte offset of the block's first token row in the file
  int64_t tokens = 0;         // token rows in the block
  int64_t first_doc = 0;      // global index of its first document
  int64_t docs = 0;           // documents in the block
  int32_t max_length = 0;     // longest document of the block
  int64_t spans_at = 0;       // index of its first document in doc_starts / doc_lengths
  uint64_t scales_offset = 0; // int8: byte offset of the block's per-token float32 scales in the file
};

// Segment files mapped and page-locked (cuMemHostRegister, read-only, portable), kept across scans so
// that repeated searches DMA straight from the page cache with no per-block registration. Made by
// PinFiles on the worker thread; the last reference unregisters and unmaps through that thread.
// Whole (corpus.pin()): every file registered at once. Ahead (`chunk` > 0): only mapped at first; a
// scan's readers register the `chunk`-byte pieces its blocks cover just before the block is needed,
// so the first block does not wait for the whole corpus, and the pieces stay registered.
struct PinnedFiles {
  Runtime* runtime = nullptr;
  std::vector<std::string> paths;
  std::vector<std::pair<void*, size_t>> maps;  // (base, bytes) per file
  uint64_t bytes = 0;                          // file bytes
  uint64_t chunk = 0;                          // 0: registered whole; else the registration unit
  // Ahead: per file, per chunk: 0 not registered, 1 being registered, 2 registered, 3 failed.
  std::vector<std::vector<uint8_t>> state;
  std::mutex mutex;
  std::condition_variable cv;
  std::atomic<uint64_t> registered{0};         // bytes registered so far
  // Registers chunk `c` of file `file` unless it is (waits while another thread registers it); adds
  // the bytes it registered to *added. Returns "" or an error naming the file.
  std::string Ensure(Runtime& rt, int file, uint64_t c, uint64_t* added);
  ~PinnedFiles();
};
// chunk_bytes 0: map and register every file whole now; else map only (pin-ahead, chunks of that size,
// a multiple of the page size).
std::shared_ptr<PinnedFiles> PinFiles(Runtime& rt, const std::vector<std::string>& paths, uint64_t chunk_bytes = 0);

struct StreamScanSpec {
  std::vector<std::string> files;
  std::vector<StreamBlock> blocks;
  const double* doc_starts = nullptr;    // per document, its first token relative to its block
  const int32_t* doc_lengths = nullptr;  // per document
  DType dtype = DType::Float16;
  int64_t dim = 0;
  int64_t capacity_tokens = 0, capacity_docs = 0;  // the largest block
  int depth = 3;
  int readers = 4;
  // true: register the mapped file's pages of each block instead of copying them to pinned buffers.
  bool register_pages = false;
  // Files already pinned or pinned ahead (same order as `files`): blocks are copied from them directly.
  std::shared_ptr<PinnedFiles> pinned;
  // true (copy mode only): read with O_DIRECT into the pinned slots (one host-memory pass); where the
  // file system refuses it, the scan reads through the page cache and says why in `transfer_note`.
  bool direct_io = false;
  // with direct_io: read through the page cache after all when it holds most of the files (sampled)
  bool direct_io_unless_cached = false;
  int64_t k = 10;
  LaunchSpec launch;
  // Written as blocks finish (documents done, bytes done); read by the JS thread for progress.
  volatile double* progress = nullptr;
  // Set non-zero by the JS thread to abort: the scan stops before the next block and throws ScanAborted.
  const volatile int32_t* cancel = nullptr;
};

// Thrown by RunStreamScan when spec.cancel was set (the binding rejects with "aborted").
struct ScanAborted : std::runtime_error {
  ScanAborted() : std::runtime_error("aborted") {}
};

struct StreamScanResult {
  int64_t k = 0;                // hits kept per query (min(k, documents))
  std::vector<float> scores;    // [nq, k], best first
  std::vector<int64_t> indices; // [nq, k], global document indices
  uint64_t bytes = 0;           // token bytes read
  uint64_t device_peak = 0;     // peak device bytes the scan allocated
  uint64_t pinned_bytes = 0;    // pinned host bytes of the slots
  double first_block_seconds = 0, seconds = 0;
  std::string transfer_mode;    // what the scan did: "pinned", "pinned-ahead", "direct", "copy", "register"
  std::string transfer_note;    // why it did not do what was asked ("" when it did)
  uint64_t registered_bytes = 0;// pin-ahead: bytes this scan registered (0 once every chunk is)
};

// Runs the scan on the runtime's worker thread (the caller is a job there). Throws CudaError for CUDA
// failures and std::runtime_error for a file that cannot be read (named).
StreamScanResult RunStreamScan(Runtime& rt, const DeviceTokens& queries, const StreamScanSpec& spec);

}  // namespace maxsim_cuda
