// The cost models of a run; see cost_models.h.
#include "calibrate/cost_models.h"

namespace hetsim::calibrate {

CostModels::CostModels(const std::string& efficiency, const std::string& calibration)
    : datasheet_(workload::load_datasheet_efficiency(efficiency)) {
  if (calibration.empty()) return;
  // Only the spread is checked here: it is stored, so cheap; the held-out error needs a model per
  // table (hetsim calibrate check).
  Database db = read_database(calibration);
  warnings_ = spread_warnings(db);
  measured_ = std::make_unique<MeasuredCostModel>(std::move(db), datasheet_);
}

CostModels::CostModels(const std::string& efficiency, Database db)
    : datasheet_(workload::load_datasheet_efficiency(efficiency)) {
  warnings_ = spread_warnings(db);
  measured_ = std::make_unique<MeasuredCostModel>(std::move(db), datasheet_);
}

const workload::CostModel& CostModels::get() const {
  return measured_ ? static_cast<const workload::CostModel&>(*measured_) : datasheet_;
}

}  // namespace hetsim::calibrate
