// Errors of the data pipeline. DataError: the data set is unusable as given (a missing path, an
// empty folder, mismatched classes, a corrupt file under --strict-data); the trainer's main
// prints it as one line and exits 2 before any process trains.
#pragma once

#include <stdexcept>

namespace worker {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace worker
