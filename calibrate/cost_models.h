// The kernel costs a run uses: measured where a calibration database has them, the datasheet
// model elsewhere (--efficiency, --calibration), with the database's spread warnings kept for the
// caller to print.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "calibrate/measured_cost_model.h"
#include "sim/workload/cost/cost_model.h"

namespace hetsim::calibrate {

// Not safe to share between threads when a database is given: MeasuredCostModel builds its
// interpolation tables on first use (measured_cost_model.cpp, `tables_`). A thread that runs
// simulations in parallel with others builds its own (sim/study/runner.cpp does).
class CostModels {
 public:
  // Empty strings: the shipped efficiency constants, no database.
  CostModels(const std::string& efficiency, const std::string& calibration);
  // A database already in memory (one imported from a profiler trace, say).
  CostModels(const std::string& efficiency, Database db);
  CostModels(const CostModels&) = delete;
  CostModels& operator=(const CostModels&) = delete;
  const workload::CostModel& get() const;
  // Doubts about the database (its measurements' spread), one sentence each.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  workload::DatasheetCostModel datasheet_;
  std::unique_ptr<MeasuredCostModel> measured_;
  std::vector<std::string> warnings_;
};

}  // namespace hetsim::calibrate
