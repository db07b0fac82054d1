#include "worker/train/requests.h"

#include <algorithm>

namespace worker {

Verdict agree(const std::vector<RankRequests>& all) {
  Verdict v;
  for (const RankRequests& r : all) {
    if (v.stop_signal == 0) v.stop_signal = r.stop_signal;
    v.save = v.save || r.save != 0;
  }
  return v;
}

RankRequests RequestAgreement::mine(int saves_received) const {
  RankRequests r;
  if (requests_.stop) r.stop_signal = requests_.stop->load();
  r.save = saves_received > saves_answered_ ? 1 : 0;
  return r;
}

Verdict RequestAgreement::answered(const Verdict& v, int saves_received) {
  if (v.save) saves_answered_ = saves_received;
  return v;
}

bool RequestAgreement::listening() {
  if (listening_ < 0) {
    // Every rank takes part in the exchange or none does: a rank without handlers (say, with
    // the checkpoint signal set in only some ranks' environments) sends zeros.
    const uint8_t here = requests_.stop || requests_.saves ? 1 : 0;
    std::vector<uint8_t> all(static_cast<size_t>(comm_.size()));
    comm_.allgather_host(&here, all.data(), 1);
    listening_ = std::any_of(all.begin(), all.end(), [](uint8_t h) { return h != 0; }) ? 1 : 0;
  }
  return listening_ != 0;
}

Verdict RequestAgreement::at_boundary() {
  if (comm_.size() == 1) {  // nothing to agree on: act at once
    const int received = saves_received();
    return answered(agree({mine(received)}), received);
  }
  if (!listening()) return {};
  const Verdict v = drain();
  sent_ = mine(saves_received());
  all_.resize(static_cast<size_t>(comm_.size()));
  comm_.allgather_host_start(&sent_, all_.data(), sizeof(RankRequests));
  in_flight_ = true;
  return v;
}

Verdict RequestAgreement::drain() {
  if (!in_flight_) return {};
  comm_.allgather_host_finish();
  in_flight_ = false;
  // Read before acting: what arrives after this is not answered by this boundary's save.
  return answered(agree(all_), saves_received());
}

}  // namespace worker
