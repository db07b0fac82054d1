// train_resnet as a function: parses the command line, reads the launcher's environment,
// picks the backend and the communicator, trains. Returns the process exit code
// (0 success, 1 failure, 2 bad command line or environment); errors go to stderr as one line.
#pragma once

namespace worker {

int run_train(int argc, const char* const* argv);

}  // namespace worker
