// Host side of the device request table: allocation (once), admission, retirement, host appends.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda/device_allocations.hpp"
#include "cuda/slot_table.cuh"
#include "sonic/types.hpp"

namespace sonic::cuda {

class DeviceSlotTable {
 public:
  explicit DeviceSlotTable(const SamplerConfig& config);
  DeviceSlotTable(const DeviceSlotTable&) = delete;
  DeviceSlotTable& operator=(const DeviceSlotTable&) = delete;

  const SlotTableView& view() const { return view_; }

  // Host calls, ordered on `stream`; admit/retire copy from host memory before returning.
  void admit(int32_t slot, const RequestParams& params, const int32_t* prompt, int64_t prompt_len,
             cudaStream_t stream);
  void retire(int32_t slot, cudaStream_t stream);
  // Appends host tokens (synchronises to read the slot's length; not a per-step call).
  void append_output(int32_t slot, const int32_t* tokens, int64_t count, cudaStream_t stream);
  uint64_t step(int32_t slot) const;  // synchronises the device
  bool active(int32_t slot) const { return host_active_[slot] != 0; }

 private:
  SamplerConfig config_;
  SlotTableView view_{};
  DeviceAllocations mem_;  // the arrays of view_ and staging_ (freed on a throw from the constructor too)
  std::vector<char> host_active_;
  int32_t* staging_ = nullptr;  // device buffer for host appends, max_history tokens
};

}  // namespace sonic::cuda
