// The study store in SQLite; see store.h.
#include "sim/study/store.h"

#include <sqlite3.h>

#include <functional>

#include "sim/core/error.h"

namespace hetsim::study {

namespace {

// Column order of the runs table; RunRecord's order.
const char* const kColumns =
    "key, model, cluster, plan, framework, perturbation, inputs, status, error, gpus, "
    "iteration_time_s, tokens_per_s, samples_per_s, mfu, peak_memory_bytes, oom, compute_s, "
    "communication_exposed_s, bubble_s, cost_per_iteration_usd, cost_per_million_tokens_usd, "
    "report_json";

// The figures are NULL for a failed run, so that aggregates over the table skip it.
const char* const kSchema = R"(CREATE TABLE IF NOT EXISTS runs (
  key TEXT PRIMARY KEY NOT NULL,
  model TEXT NOT NULL, cluster TEXT NOT NULL, plan TEXT NOT NULL, framework TEXT NOT NULL,
  perturbation TEXT NOT NULL DEFAULT '',
  inputs TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
  error TEXT NOT NULL,
  gpus INTEGER,
  iteration_time_s REAL, tokens_per_s REAL, samples_per_s REAL, mfu REAL,
  peak_memory_bytes INTEGER, oom INTEGER,
  compute_s REAL, communication_exposed_s REAL, bubble_s REAL,
  cost_per_iteration_usd REAL, cost_per_million_tokens_usd REAL,
  report_json TEXT NOT NULL))";

// Columns added after the first stores were written, added to such a store when it is opened
// (its rows keep their keys, which no new run shares: every key hashes the record version).
const char* const kAddedColumns[][2] = {
    {"perturbation", "TEXT NOT NULL DEFAULT ''"},
    {"cost_per_iteration_usd", "REAL"},
    {"cost_per_million_tokens_usd", "REAL"},
};

// A prepared statement, finalised on every path.
class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql, const std::string& path) {
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s_, nullptr) != SQLITE_OK) {
      const std::string msg = sqlite3_errmsg(db);
      sqlite3_finalize(s_);
      throw InputError(path + ": not a hetsim study store (" + msg + ")");
    }
  }
  ~Statement() { sqlite3_finalize(s_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  sqlite3_stmt* get() { return s_; }
  void text(int i, const std::string& v) {
    sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  }

 private:
  sqlite3_stmt* s_ = nullptr;
};

std::string column_text(sqlite3_stmt* s, int i) {
  const unsigned char* t = sqlite3_column_text(s, i);
  return t ? std::string(reinterpret_cast<const char*>(t),
                         static_cast<size_t>(sqlite3_column_bytes(s, i)))
           : std::string();
}

RunRecord read_row(sqlite3_stmt* s) {
  RunRecord r;
  int i = 0;
  r.key = column_text(s, i++);
  r.model = column_text(s, i++);
  r.cluster = column_text(s, i++);
  r.plan = column_text(s, i++);
  r.framework = column_text(s, i++);
  r.perturbation = column_text(s, i++);
  r.inputs = column_text(s, i++);
  r.ok = column_text(s, i++) == "ok";
  r.error = column_text(s, i++);
  r.gpus = sqlite3_column_int64(s, i++);
  r.iteration_time_s = sqlite3_column_double(s, i++);
  r.tokens_per_s = sqlite3_column_double(s, i++);
  r.samples_per_s = sqlite3_column_double(s, i++);
  r.mfu = sqlite3_column_double(s, i++);
  r.peak_memory_bytes = sqlite3_column_int64(s, i++);
  r.oom = sqlite3_column_int64(s, i++) != 0;
  r.compute_s = sqlite3_column_double(s, i++);
  r.communication_exposed_s = sqlite3_column_double(s, i++);
  r.bubble_s = sqlite3_column_double(s, i++);
  for (std::optional<double>* v : {&r.cost_per_iteration_usd, &r.cost_per_million_tokens_usd}) {
    if (sqlite3_column_type(s, i) != SQLITE_NULL) *v = sqlite3_column_double(s, i);
    ++i;
  }
  r.report_json = column_text(s, i++);
  return r;
}

}  // namespace

Store::Store(const std::string& path) : path_(path) {
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) !=
      SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    throw InputError(path + ": cannot open the study store (" + msg + ")");
  }
  // Another process (a reader, a second study on the same store) may hold a lock briefly.
  sqlite3_busy_timeout(db_, 10000);
  try {
    // WAL: a commit appends to the log; a crash before the commit record leaves the transaction
    // out, after it in. synchronous=NORMAL syncs at checkpoints, not each commit: a committed
    // run survives the process being killed (the log is in the OS's cache), and a power loss
    // can lose the last commits but never corrupts the file.
    exec("PRAGMA journal_mode=WAL");
    exec("PRAGMA synchronous=NORMAL");
    exec(kSchema);
    std::set<std::string> have;
    {
      Statement info(db_, "PRAGMA table_info(runs)", path_);
      while (sqlite3_step(info.get()) == SQLITE_ROW) have.insert(column_text(info.get(), 1));
    }
    for (const auto& [name, type] : kAddedColumns) {
      if (!have.count(name)) exec(std::string("ALTER TABLE runs ADD COLUMN ") + name + " " + type);
    }
    Statement check(db_, std::string("SELECT ") + kColumns + " FROM runs LIMIT 0", path_);
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

Store::~Store() { sqlite3_close(db_); }

void Store::exec(const std::string& sql) const {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw InputError(path_ + ": not a hetsim study store (" + msg + ")");
  }
}

void Store::put(const RunRecord& r) {
  // One statement in autocommit mode is one transaction.
  Statement s(db_,
              std::string("INSERT OR REPLACE INTO runs (") + kColumns +
                  ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
              path_);
  int i = 1;
  s.text(i++, r.key);
  s.text(i++, r.model);
  s.text(i++, r.cluster);
  s.text(i++, r.plan);
  s.text(i++, r.framework);
  s.text(i++, r.perturbation);
  s.text(i++, r.inputs);
  s.text(i++, r.ok ? "ok" : "failed");
  s.text(i++, r.error);
  sqlite3_stmt* st = s.get();
  auto integer = [&](int64_t v) {
    r.ok ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
    ++i;
  };
  auto real = [&](double v) {
    r.ok ? sqlite3_bind_double(st, i, v) : sqlite3_bind_null(st, i);
    ++i;
  };
  integer(r.gpus);
  for (double v : {r.iteration_time_s, r.tokens_per_s, r.samples_per_s, r.mfu}) real(v);
  integer(r.peak_memory_bytes);
  integer(r.oom ? 1 : 0);
  for (double v : {r.compute_s, r.communication_exposed_s, r.bubble_s}) real(v);
  for (const std::optional<double>& v : {r.cost_per_iteration_usd, r.cost_per_million_tokens_usd}) {
    v&& r.ok ? sqlite3_bind_double(st, i, *v) : sqlite3_bind_null(st, i);
    ++i;
  }
  s.text(i++, r.report_json);
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    throw RunError(path_ + ": cannot record run " + r.key + ": " + sqlite3_errmsg(db_));
  }
}

std::set<std::string> Store::keys() const {
  std::set<std::string> out;
  Statement s(db_, "SELECT key FROM runs", path_);
  while (sqlite3_step(s.get()) == SQLITE_ROW) out.insert(column_text(s.get(), 0));
  return out;
}

std::optional<RunRecord> Store::find(const std::string& key) const {
  Statement s(db_, std::string("SELECT ") + kColumns + " FROM runs WHERE key = ?", path_);
  s.text(1, key);
  if (sqlite3_step(s.get()) != SQLITE_ROW) return std::nullopt;
  return read_row(s.get());
}

std::vector<RunRecord> Store::records() const {
  std::vector<RunRecord> out;
  Statement s(db_, std::string("SELECT ") + kColumns + " FROM runs ORDER BY key", path_);
  while (sqlite3_step(s.get()) == SQLITE_ROW) out.push_back(read_row(s.get()));
  return out;
}

}  // namespace hetsim::study
