// The CUDA scoring engine in plain C++ (no Node): the jobs the addon's cuda object runs, as functions
// over POD structs and a Runtime (runtime.h). Every job runs on the runtime's worker thread (inside a
// Runtime::Post job), calls EnsureReady() and leaves the stream idle when it returns, however it
// returns. Errors: std::invalid_argument for bad arguments, CudaError for the driver.
// The bindings (native/binding/cuda_binding.cc) only unpack JS arguments into these structs and wrap
// the results; native/cuda/test/engine_check.cc drives the same functions without Node.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "device_select.h"
#include "runtime.h"
#include "tokens.h"

namespace maxsim_cuda {

// ---- token sets (engine_sets.cc) ----

// A new device set holding the items of a host set (packed). Synchronizes.
std::shared_ptr<DeviceTokens> UploadSet(Runtime& rt, const TokenSet& host);
// A new 8-bit token set quantized on the device from a float set, one float32 scale per token:
// int8 (per-token symmetric, bitwise the host quantize() of src/ops/quantize.ts) or, with e4m3,
// fp8 e4m3 codes (max|x| -> 448). Throws std::invalid_argument for an 8-bit source or for a token
// holding +-Inf. Synchronizes.
// per_document: one scale per item, the largest of its tokens' (every token of an item shares it)
std::shared_ptr<DeviceTokens> Quantize8(Runtime& rt, const DeviceTokens& src, bool e4m3, bool per_document = false);
// A view of some items of `src` (indices into its items, any order, repeats allowed): new starts /
// lengths, the same token memory, gathered from src's host spans (downloaded only for a set without
// them). Throws std::invalid_argument for an index out of range. Leaves the span uploads in flight
// (stream order); the job synchronizes.
std::shared_ptr<DeviceTokens> Select(Runtime& rt, const std::shared_ptr<DeviceTokens>& src, const std::vector<int64_t>& indices);
// A view of `n` items of src whose starts / lengths a kernel writes (device_select.h): no host
// spans, the parent's longest item as max_length (kernels do not read it; planning went by it).
std::shared_ptr<DeviceTokens> ViewShell(Runtime& rt, const std::shared_ptr<DeviceTokens>& src, int64_t n);

// A device set's items back on the host (not a view): packed tokens, starts / lengths, int8 scales.
struct HostCopy {
  DType dtype = DType::Float32;
  bool e4m3 = false;
  int64_t dim = 0;
  std::vector<uint8_t> data;  // [tokens * dim * DTypeSize(dtype)]
  std::vector<int64_t> starts;
  std::vector<int32_t> lengths;
  std::vector<float> scales;  // int8 / fp8 only: per token
};
HostCopy DownloadSet(Runtime& rt, const DeviceTokens& t);
// The lengths of the first `count` items of t (<= t.count): the host mirror where the set has one,
// else a download. Items never change once appended, so these stay the lengths of those items.
std::vector<int32_t> SetLengths(Runtime& rt, const DeviceTokens& t, int64_t count);

// Synchronizes when the job's scope ends, whatever way it ends: jobs that leave copies in flight
// (Append without synchronize, Select) still leave the stream idle (runtime.h).
class IdleAtExit {
 public:
  explicit IdleAtExit(Runtime& rt) : rt_(rt) {}
  ~IdleAtExit() {
    if (idle_) return;
    try {
      rt_.Synchronize();
    } catch (...) {  // the job's own error (if any) is the one to report
    }
  }
  // The job's last stream work was a synchronize (its read-back) and nothing was enqueued since:
  // the stream is idle already, so the exit skips its synchronize. Call it just before returning.
  void Idle() { idle_ = true; }
  IdleAtExit(const IdleAtExit&) = delete;
  IdleAtExit& operator=(const IdleAtExit&) = delete;

 private:
  Runtime& rt_;
  bool idle_ = false;
};

// The scratch of one job (worker thread): device blocks from the runtime's caching allocator (no
// driver allocation once warm) that go back when the job ends, and deferred checks: an 8-byte device
// flag copied into the runtime's pinned flag slots in stream order and judged after the job's next
// synchronize, so that a check (a quantize's non-finite token) costs no synchronize of its own.
// Declare it after the job's IdleAtExit: its blocks go back before the stream idles, which stream
// order makes safe (everything that uses them is on the one stream).
class JobScratch {
 public:
  explicit JobScratch(Runtime& rt) : rt_(rt) {}
  cu::CUdeviceptr Take(uint64_t bytes);
  // Enqueues the copy of the uint64 at `flag`; after a synchronize, CheckDeferred() throws
  // `message(value)` when the value is not `ok`.
  void Defer(cu::CUdeviceptr flag, uint64_t ok, std::string (*message)(uint64_t));
  // Judges the deferred flags; the stream must have synchronized since the last Defer.
  void CheckDeferred();
  // The job's host queries once on the device: a second QuerySource over the same host batch
  // (twoStage's scan and exact queries, the same JS batch) reuses the first upload.
  std::shared_ptr<DeviceTokens> uploaded;
  TokenSet uploaded_from;  // the host batch it came from (token memory by address, spans by value)
  // The NaN fill of a small score matrix carried by the query upload (one copy, no memset launch):
  // set fold_fill to the matrix's floats before ResolveQueries; a host upload of at most
  // kFoldedFillBytes of them appends the NaNs to its block, and NaNMatrix(floats) then returns it.
  static constexpr uint64_t kFoldedFillBytes = 16 << 10;
  uint64_t fold_fill = 0;
  cu::CUdeviceptr folded = 0;
  // Whether the job's one small upload through Staging::JobUpload happened (a second one stages).
  bool job_upload_used = false;
  // A device matrix of `floats` NaNs for a job's scores: the folded block when the upload carried
  // one of that size, else a scratch block filled in stream order (Runtime::FillNaN).
  cu::CUdeviceptr NaNMatrix(uint64_t floats);

 private:
  struct Pending {
    int slot;
    uint64_t ok;
    std::string (*message)(uint64_t);
  };
  Runtime& rt_;
  std::vector<std::unique_ptr<ScopedBlock>> blocks_;
  std::vector<Pending> pending_;
  int used_slots_ = 0;
};

// Quantize8 of a job's queries (per token) into `scratch`, its non-finite check deferred there
// (engine_sets.cc): no allocation of its own, no synchronize.
std::shared_ptr<DeviceTokens> QuantizeQueries8(Runtime& rt, const DeviceTokens& src, bool e4m3, JobScratch& scratch);

// ---- scoring jobs (engine_score.cc, engine_topk.cc) ----

// Benchmark-only switches of a job, passed explicitly (never read from the environment).
struct JobOptions {
  // Synchronize at each phase boundary and report the wall time of every phase in Heaps::phases, to
  // find where a job's fixed cost goes (changes the job's timing, never its result).
  bool time_phases = false;
  // Small score matrices selected on the host (and score jobs') are written by the kernel straight
  // into pinned host memory (Staging::Scores: no fill launch, no read-back copy) when true; false
  // keeps them on the device (for comparing the two; the results are the same bits).
  bool mapped_scores = true;
};

// Whether a job scores into Staging::Scores: mapped_scores on, a device that maps pinned host memory
// at its host address (unified addressing), a matrix of at most kScoresBytes,
// and queries whose 16-row slices hold at most kMappedQueryTokens rows in all (the wgmma kernels
// carry sums that span query passes in the score array, which would be re-read across the bus from
// host memory; so few rows take one pass).
constexpr int64_t kMappedQueryTokens = 64;
bool UseMappedScores(Runtime& rt, const JobOptions& options, int64_t rows, int64_t cols, int64_t max_query_length);

// The queries of a job: a device token set, or a host batch the job uploads itself.
struct QuerySource {
  std::shared_ptr<DeviceTokens> device;
  TokenSet host;
  bool is_host = false;
  DType dtype = DType::Float32;
  bool e4m3 = false;
  int64_t dim = 0;
  int64_t count = 0;  // as of the call (device sets: the caller's snapshot)
  // Host float32 queries for a float16 / bfloat16 corpus, converted on the device, and host float
  // queries for an int8 corpus, quantized there (dtype is the corpus's then; ConvertHostQueriesFor);
  // small finite float32 batches are converted or quantized on the worker while they are packed
  // (query_convert.h), with the same bytes.
  bool cast_from_f32 = false;
  bool quantize_int8 = false;
};
QuerySource DeviceQueries(std::shared_ptr<DeviceTokens> set);
QuerySource HostQueries(TokenSet host);

// The longest item of a job's queries (host: from the batch's lengths; device: the set's).
int64_t MaxQueryLength(const QuerySource& q);
// Staging::Scores filled with `floats` NaNs on the host (Runtime::FillNaN's), for a kernel to write
// into; stream idle (the previous job synchronized), so no copy still targets it.
float* MappedNaNScores(Runtime& rt, uint64_t floats);
// A host pointer of pinned memory as the kernels' device pointer (unified addressing: the same).
inline cu::CUdeviceptr MappedPtr(const float* p) { return static_cast<cu::CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }

// Host queries are converted on the device by the job, sparing the host a pass over every value:
// float32 ones against float16 / bfloat16 documents (CastSet: the host encodeFloats' bits), float
// ones against int8 documents (Quantize8: per token, the host quantize()'s bytes). Against fp8
// documents ResolveQueries quantizes float queries anyway. docs_dtype / docs_e4m3: the documents'.
void ConvertHostQueriesFor(QuerySource& q, DType docs_dtype, bool docs_e4m3);

// The queries on the device; against fp8 documents, quantized to e4m3 there (worker thread). Host
// float32 queries for a float16 / bfloat16 corpus are refused (std::invalid_argument, before any
// copy) when a finite value would become +-Infinity, the values encodeFloats refuses. Host
// queries go up in one copy (tokens, scales, starts, lengths packed in one scratch block through
// pinned staging), are converted in the stream without a synchronize, and a quantize's non-finite
// check is deferred to the job's next synchronize (scratch.CheckDeferred()). The returned set and
// its conversions live in `scratch`: the caller holds an IdleAtExit and the scratch.
std::shared_ptr<DeviceTokens> ResolveQueries(Runtime& rt, QuerySource& q, const DeviceTokens& docs, JobScratch& scratch);

// The [queries, docs] score matrix (row-major), through one launch plan from the dispatcher.
std::vector<float> Score(Runtime& rt, QuerySource& queries, const DeviceTokens& docs, const LaunchSpec& launch,
                         const JobOptions& options = {});

// Kernel timing (benchmarks only): `iters` launches timed with device events, after `warmup` untimed
// ones and then untimed ones for about `warmup_ms` of device time. docs[1..] are cycled through with
// docs[0] so that consecutive launches do not hit a warm L2. On the H200 a heavy kernel's clock
// depends on how long the load has run (the power controller: bench/NOTES.md, 'The power cap'), so a
// second of warm-up measures the sustained regime, a few launches the burst one.
struct BenchSpec {
  int64_t warmup = 3, iters = 10;
  double warmup_ms = 0;
};
struct BenchResult {
  std::vector<float> ms;
  uint64_t peak_bytes = 0;
};
BenchResult BenchLaunches(Runtime& rt, QuerySource& queries, const std::vector<std::shared_ptr<DeviceTokens>>& docs,
                          const LaunchSpec& launch, const BenchSpec& spec);

// Top-K heaps: row r's heap (n entries, the layout topKOfRow of src/ops/topk.ts builds) at
// [r * n, (r + 1) * n) of scores / indices; TypeScript ranks it with sortedHits().
struct Heaps {
  int64_t n = 0;
  std::vector<float> scores;
  std::vector<int32_t> indices;
  bool on_device = false;  // SelectMatrix: whether it selected on the device
  // With JobOptions::time_phases: "<phase> <ms> ..." (each phase's wall time, synchronized at its end)
  std::string phases;
};


// The k best documents per query: the scores stay on the device, selected there (device_select.h)
// where the plan chose kDevice (refused outside the device selection's limits, naming `select`), else
// read back in chunks into the host heaps.
Heaps TopK(Runtime& rt, QuerySource& queries, const DeviceTokens& docs, const LaunchSpec& launch, int64_t k,
           SelectWhere select, const JobOptions& options = {});

// Two-stage top-K in one job: scan every document of scan_docs, keep the `candidates` best per query,
// score the queries against a view of exact_docs holding the candidates, and keep the k best
// candidates of each query by that exact score. Both launches come from the TypeScript dispatcher (the
// exact one planned for min(count, rows * candidates) documents). Candidates are visited in ascending
// document index, so exact ties go to the lower index, as everywhere.
struct TwoStageJob {
  QuerySource scan_queries, exact_queries;
  std::shared_ptr<DeviceTokens> scan_docs, exact_docs;
  LaunchSpec scan_launch, exact_launch;
  int64_t k = 0, candidates = 0, count = 0;
  // Where the scan's candidates are selected (kDevice: refused outside the device selection's limits,
  // naming spec.select). The exact stage follows: on the device, its scores of each query's own
  // candidates are gathered there; on the host, the union is rescored and read back in chunks.
  SelectWhere select = SelectWhere::kHost;
  // Queries per exact launch where the device selects (0: all of them in one). A launch scores its
  // queries against the candidates of all of them, so one launch for R rows costs R x R x candidates
  // pairs; groups of G cost R x G x candidates. exact_launch is planned for G queries (src/backends/
  // cuda-two-stage-plan.ts).
  int64_t exact_group = 0;
};
Heaps TwoStage(Runtime& rt, TwoStageJob& job, const JobOptions& options = {});

// The rows of a host matrix [rows * cols] uploaded and selected as TopK selects a device score matrix
// (tests and benchmarks), where `select` says.
Heaps SelectMatrix(Runtime& rt, const std::vector<float>& matrix, int64_t rows, int64_t cols, int64_t k, SelectWhere select);

// The heaps of the rows of a host matrix [rows * cols], on the calling thread, by the code the jobs
// use (so the CPU tests can check it against topKOfRow without a GPU).
Heaps HostTopK(const float* matrix, int64_t rows, int64_t cols, int64_t k);

}  // namespace maxsim_cuda
