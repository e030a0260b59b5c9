// The deterministic dD of the backward: the plan's CSR document blocks, expanded and run.
#include <algorithm>
#include <limits>
#include <string>

#include "train_internal.h"

namespace maxsim_cuda::train {

// The plan's CSR blocks with their rows, source bounds and longest documents (from the lengths),
// checked: consecutive blocks covering every document, the query blocks covering every query once,
// the block-wide walk only where the block's documents fit its shared memory, and each block's
// sources and cells within the CSR's 32-bit counts. The budgets (how many sources and cells a block
// may have) are TypeScript's; a block over them only takes more memory.
std::vector<DocBlock> ExpandBlocks(const Problem& a, const BackwardPlan& plan) {
  constexpr int64_t kU32 = int64_t(std::numeric_limits<uint32_t>::max());
  auto fail = [](size_t k, const std::string& expected, const std::string& received) {
    PlanError("blocks[" + std::to_string(k) + "]", expected, received);
  };
  if (plan.blocks.empty()) PlanError("blocks", "at least one CSR block for dD '" + std::string(plan.dd == DDPath::kAuto ? "auto" : "csr") + "'", "none");
  int64_t tq = 0;  // sources of one document, at most: every query token (all pairs)
  for (int64_t i = 0; i < a.q.count; i++) tq += a.q.lengths[i];
  std::vector<DocBlock> blocks;
  int64_t row = 0;
  int32_t begin = 0;
  for (size_t k = 0; k < plan.blocks.size(); k++) {
    const CsrBlock& c = plan.blocks[k];
    if (c.doc_end < begin || c.doc_end > a.d.count || (k + 1 == plan.blocks.size() && c.doc_end != a.d.count)) {
      fail(k, "a document end in [" + std::to_string(begin) + ", " + std::to_string(a.d.count) + "]" +
                  (k + 1 == plan.blocks.size() ? " equal to the document count (the last block)" : ""),
           std::to_string(c.doc_end));
    }
    DocBlock b;
    b.doc_begin = begin;
    b.doc_end = c.doc_end;
    b.row_begin = row;
    for (int32_t j = begin; j < c.doc_end; j++) {
      const int64_t ld = std::max<int32_t>(a.d.lengths[j], 0);
      b.bound += ld == 0 ? 0 : (a.pairs == 0 ? tq : a.q.lengths[j]);
      b.longest = std::max<int32_t>(b.longest, static_cast<int32_t>(ld));
      row += ld;
    }
    b.row_end = row;
    b.by_block = c.by_block;
    b.qblocks = c.qblocks;
    b.qblock_size = c.qblock_size;
    if (b.by_block && b.longest > MAXSIM_TRAIN_WALK_MAX_LENGTH) {
      fail(k, "byBlock false for a block with a document of more than " + std::to_string(MAXSIM_TRAIN_WALK_MAX_LENGTH) +
                  " tokens (the block-wide walk's shared memory)",
           "true with a document of " + std::to_string(b.longest));
    }
    const bool split = a.pairs == 0 && a.q.count > 0;
    const bool cover = split ? b.qblock_size >= 1 && b.qblocks == CeilDiv(a.q.count, b.qblock_size) : b.qblocks == 1 && b.qblock_size == 1;
    if (!cover) {
      fail(k, split ? "query blocks of q >= 1 queries, ceil(" + std::to_string(a.q.count) + " / q) of them" : "1 query block of 1 (diagonal pairs)",
           std::to_string(b.qblocks) + " of " + std::to_string(b.qblock_size));
    }
    if (b.bound > kU32 && b.doc_end - b.doc_begin > 1) {
      fail(k, "at most 2^32 - 1 sources (the CSR counts them in 32 bits)", std::to_string(b.bound) + " in " + std::to_string(b.doc_end - b.doc_begin) + " documents");
    }
    if (b.cells() > kU32 - 1) fail(k, "fewer than 2^32 - 1 cells", std::to_string(b.cells()));
    blocks.push_back(b);
    begin = c.doc_end;
  }
  return blocks;
}

// The deterministic dD: document block after document block, count -> scan -> place -> gather.
// Returns false without touching dD when the plan's path is 'auto' and the first block's contention is low.
bool RunCsr(Runtime* rt, const Problem& a, const BackwardPlan& plan, MaxsimTrainParams p, PhaseTimer& timer) {
  constexpr int64_t kPartialCols = MAXSIM_TRAIN_PARTIAL_COLS;
  constexpr int64_t kScanTile = MAXSIM_TRAIN_SCAN_TILE;
  const int64_t csr_chunk = plan.csr_chunk;
  const std::vector<DocBlock> blocks = ExpandBlocks(a, plan);
  int64_t max_cells = 1, max_bound = 1;
  for (const DocBlock& b : blocks) {
    max_cells = std::max(max_cells, b.cells());
    max_bound = std::max(max_bound, b.bound);
  }
  int64_t max_rows = 1;
  for (const DocBlock& b : blocks) max_rows = std::max(max_rows, b.row_end - b.row_begin);
  const int64_t max_chunks = 2 * max_bound / csr_chunk + 1;
  const int64_t max_tiles = CeilDiv(max_cells, kScanTile);
  ScopedBlock counts(rt->allocator(), static_cast<uint64_t>(max_cells) * sizeof(uint32_t));
  ScopedBlock offsets(rt->allocator(), static_cast<uint64_t>(max_cells + 1) * sizeof(uint32_t));
  ScopedBlock block_sums(rt->allocator(), static_cast<uint64_t>(max_tiles) * sizeof(uint32_t));
  ScopedBlock sources(rt->allocator(), static_cast<uint64_t>(max_bound) * sizeof(uint32_t));
  ScopedBlock stats(rt->allocator(), 2 * sizeof(unsigned long long));
  ScopedBlock chunk_off(rt->allocator(), static_cast<uint64_t>(max_rows + 1) * sizeof(uint32_t));
  ScopedBlock chunk_row(rt->allocator(), static_cast<uint64_t>(max_chunks) * sizeof(uint32_t));
  ScopedBlock partials(rt->allocator(), static_cast<uint64_t>(max_chunks * kPartialCols) * sizeof(double));
  p.counts = DevPtr<uint32_t>(counts.get());
  p.offsets = DevPtr<uint32_t>(offsets.get());
  p.block_sums = DevPtr<uint32_t>(block_sums.get());
  p.sources = DevPtr<uint32_t>(sources.get());
  p.stats = DevPtr<unsigned long long>(stats.get());
  p.chunk_off = DevPtr<uint32_t>(chunk_off.get());
  p.chunk_row = DevPtr<uint32_t>(chunk_row.get());
  p.partials = DevPtr<double>(partials.get());
  p.chunk = csr_chunk;
  p.max_chunks = max_chunks;
  const std::string gather = std::string("maxsim_train_dd_gather_") + KernelSuffix(a.q.dtype);
  const std::string gather_split = std::string("maxsim_train_dd_gather_split_") + KernelSuffix(a.q.dtype);
  bool decided = plan.dd != DDPath::kAuto;
  for (size_t k = 0; k < blocks.size(); k++) {
    const DocBlock& b = blocks[k];
    p.doc_begin = b.doc_begin;
    p.doc_end = b.doc_end;
    p.row_begin = b.row_begin;
    p.row_end = b.row_end;
    p.qblocks = b.qblocks;
    p.qblock_size = b.qblock_size;
    p.cells = b.cells();
    if (b.row_end == b.row_begin) continue;  // only empty documents: no rows to write
    timer.Mark();
    const int64_t units = static_cast<int64_t>(b.doc_end - b.doc_begin) * b.qblocks;
    const int64_t tiles = CeilDiv(p.cells, kScanTile);
    // The block-wide walk: a word per token of the longest document (count), 2 per warp (place).
    const unsigned words = static_cast<unsigned>(b.longest) * sizeof(uint32_t);
    auto walk = [&](bool place) {
      if (b.by_block) {
        Launch1D(rt, place ? "maxsim_train_dd_place_block" : "maxsim_train_dd_count_block", units,
                 32 * MAXSIM_TRAIN_WALK_WARPS, p, place ? 2 * MAXSIM_TRAIN_WALK_WARPS * words : words);
      } else {
        Launch1D(rt, place ? "maxsim_train_dd_place" : "maxsim_train_dd_count", CeilDiv(units, 4), 128, p);
      }
    };
    if (!b.by_block) ZeroWords(rt, counts.get(), static_cast<uint64_t>(p.cells));  // the block walk writes every cell
    walk(false);
    Launch1D(rt, "maxsim_train_dd_scan_reduce", tiles, 1024, p);
    Launch1D(rt, "maxsim_train_dd_scan_top", 1, 1024, p);
    Launch1D(rt, "maxsim_train_dd_scan_down", tiles, 1024, p);
    if (!decided) {  // 'auto': the first block with rows measures the contention
      decided = true;
      ZeroWords(rt, stats.get(), 4);
      Launch1D(rt, "maxsim_train_dd_stats", std::min<int64_t>(CeilDiv(b.row_end - b.row_begin, 256), 1024), 256, p);
      uint32_t total = 0;
      unsigned long long distinct = 0;
      rt->Download(&total, offsets.get() + static_cast<uint64_t>(p.cells) * sizeof(uint32_t), sizeof(total));
      rt->Download(&distinct, stats.get(), sizeof(distinct));
      if (total > 0 && static_cast<double>(distinct) >= plan.auto_atomic_distinct * static_cast<double>(total)) {
        return false;
      }
    }
    walk(true);
    timer.Device("dDBuild");  // count, scan, place (and the 'auto' measurement)
    timer.Mark();
    const int64_t rows = b.row_end - b.row_begin;
    Launch1D(rt, gather, CeilDiv(rows, 4), 128, p);  // rows of at most csr_chunk sources
    // Split rows: chunks per row (into counts, free after place) -> chunk_off (the scan kernels on
    // rows instead of cells) -> chunk -> row map -> per column slice: chunk sums, then the rows.
    const int64_t row_threads = std::min<int64_t>(CeilDiv(rows, 256), 4096);
    Launch1D(rt, "maxsim_train_dd_chunk_count", row_threads, 256, p);
    MaxsimTrainParams pc = p;
    pc.offsets = p.chunk_off;
    pc.cells = rows;
    const int64_t row_tiles = CeilDiv(rows, kScanTile);
    Launch1D(rt, "maxsim_train_dd_scan_reduce", row_tiles, 1024, pc);
    Launch1D(rt, "maxsim_train_dd_scan_top", 1, 1024, pc);
    Launch1D(rt, "maxsim_train_dd_scan_down", row_tiles, 1024, pc);
    Launch1D(rt, "maxsim_train_dd_chunk_map", row_threads, 256, p);
    const int64_t chunk_bound = std::min(max_chunks, 2 * b.bound / csr_chunk + 1);
    for (int64_t k0 = 0; k0 < a.q.dim; k0 += kPartialCols) {
      p.k_begin = k0;
      Launch1D(rt, gather_split, CeilDiv(chunk_bound, 4), 128, p);
      Launch1D(rt, "maxsim_train_dd_combine", CeilDiv(rows, 4), 128, p);
    }
    timer.Device("dDGather");
  }
  // The CSR blocks go back to the allocator when this scope ends: finish using them first.
  rt->Synchronize();
  return true;
}

}  // namespace maxsim_cuda::train
