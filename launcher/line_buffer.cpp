#include "launcher/line_buffer.h"

namespace launch {

void LineSplitter::feed(std::string_view data, const std::function<void(std::string_view)>& on_line) {
  while (!data.empty()) {
    size_t nl = data.find('\n');
    size_t room = max_line_ - partial_.size();
    if (nl == std::string_view::npos || nl > room) {
      if (data.size() < room) {
        partial_.append(data);
        return;
      }
      partial_.append(data.substr(0, room));
      data.remove_prefix(room);
      on_line(partial_);
      partial_.clear();
      continue;
    }
    if (partial_.empty()) {
      on_line(data.substr(0, nl));
    } else {
      partial_.append(data.substr(0, nl));
      on_line(partial_);
      partial_.clear();
    }
    data.remove_prefix(nl + 1);
  }
}

void LineSplitter::finish(const std::function<void(std::string_view)>& on_line) {
  if (partial_.empty()) return;
  on_line(partial_);
  partial_.clear();
}

void TailLines::push(std::string_view line) {
  if (n_ == 0) return;
  if (lines_.size() == n_) lines_.pop_front();
  lines_.emplace_back(line);
}

}  // namespace launch
