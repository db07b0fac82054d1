// What the trainer prints about a finished run besides its log lines: the memory breakdown
// (WORKER_MEM_REPORT=1), the parameter checksums of every rank, number formatting.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>

#include "worker/comm/comm.h"
#include "worker/core/model.h"
#include "worker/core/ops.h"

namespace worker {

// printf-style formatting of one number ("%.6f").
std::string strf(const char* format, double v);

// Where the device memory went (the model's and the backend's shares, the optimizer state),
// one line per item; what no one claims (NCCL's gather buffer, ...) is "other".
void memory_report(std::ostream& out, const Model& model, const Ops& ops, size_t optimizer_bytes);

// Every rank prints the checksum of its parameters and buffers (`st`); rank 0 says whether all
// agree. Returns whether they do (on every rank).
bool report_checksums(const ModelState& st, Comm& comm, std::ostream& out);

}  // namespace worker
