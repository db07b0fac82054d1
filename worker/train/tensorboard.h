// TensorBoard event files, written by hand: a file of TFRecords (little-endian u64 length, the
// masked CRC-32C of those 8 bytes, the payload, the masked CRC-32C of the payload), each payload
// a tensorflow.Event protobuf: the first carries file_version "brain.Event:2", the others a
// Summary of scalar values (Summary.Value: tag = 1, simple_value = 2). That is all TensorBoard
// needs for its scalar dashboard; the few protobuf fields are encoded here rather than pulling
// in protobuf. The encoders are pure functions, tested by reading files back with TensorBoard's
// own reader (tests/worker/train/test_train_resnet.py, case tensorboard).
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace worker {
namespace tb {

uint32_t crc32c(const void* data, size_t n);         // CRC-32C (Castagnoli), as TFRecord uses
uint32_t masked_crc32c(const void* data, size_t n);  // ((crc >> 15) | (crc << 17)) + 0xa282ead8

std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values);
std::string tfrecord(const std::string& payload);     // the framing around one payload

}  // namespace tb

class EventWriter {
 public:
  // Creates `dir` and events.out.tfevents.<seconds>.<host>.<pid> in it; an empty dir writes nothing.
  void open(const std::string& dir);
  bool is_open() const { return file_.is_open(); }
  const std::string& path() const { return path_; }
  // One event with these scalars at `step`, flushed at once.
  void scalars(int64_t step, const std::vector<std::pair<std::string, float>>& values);

 private:
  std::ofstream file_;
  std::string path_;
};

}  // namespace worker
