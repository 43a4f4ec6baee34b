// The results of a study, one row per run, in an SQLite database in WAL mode.
//
// Why SQLite and not HDF5 (which hetsim already uses for calibration data): each finished run
// must be recorded atomically while others are still running, and a `kill -9` at any moment must
// lose no recorded run and leave a readable file. SQLite gives that by design: each run is one
// committed transaction, and after a crash the write-ahead log is replayed or discarded whole on
// the next open. Readers (a second `sqlite3` shell, a test, a report) may read while the study
// writes, and the resumed study finds what is done with one indexed query. HDF5 has no
// transactions: a process killed while it extends a dataset or flushes its metadata can leave a
// file the library refuses to open (SWMR helps readers, not a writer that dies mid-write), so it
// would need a journal of its own beside it.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

struct sqlite3;

namespace hetsim::study {

struct RunRecord {
  std::string key;
  std::string model, cluster, plan, framework;  // the study's labels
  std::string perturbation;                     // its label; "" for none
  std::string inputs;                           // JSON: the resolved inputs and overrides
  bool ok = false;                              // false: the run failed, see error
  std::string error;
  int64_t gpus = 0;
  double iteration_time_s = 0, tokens_per_s = 0, samples_per_s = 0, mfu = 0;
  int64_t peak_memory_bytes = 0;  // the fullest GPU's
  bool oom = false;               // a result, not a failure
  double compute_s = 0, communication_exposed_s = 0, bubble_s = 0;
  // On-demand price of every GPU over the iteration; none when a GPU type has no price.
  std::optional<double> cost_per_iteration_usd, cost_per_million_tokens_usd;
  std::string report_json;  // what `hetsim simulate --json` prints; "" for a failed run
  // Not stored: the study's reference iteration time for this run (a case's), set by
  // study_records from the study file.
  std::optional<double> reference_s;
  bool operator==(const RunRecord&) const = default;
};

class Store {
 public:
  // Opens or creates the database. InputError when it cannot be opened or is not a study store.
  explicit Store(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Records one run in its own transaction (replacing a row of the same key); when it returns,
  // the row survives a crash of this process. RunError when the write fails.
  void put(const RunRecord& r);
  std::set<std::string> keys() const;
  std::optional<RunRecord> find(const std::string& key) const;
  std::vector<RunRecord> records() const;  // by key
  const std::string& path() const { return path_; }

 private:
  void exec(const std::string& sql) const;
  std::string path_;
  sqlite3* db_ = nullptr;
};

}  // namespace hetsim::study
