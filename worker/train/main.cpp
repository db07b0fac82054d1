// train_resnet: data-parallel ResNet training, one process per rank, started by `launch`.
#include "worker/train/run.h"

int main(int argc, char** argv) { return worker::run_train(argc, argv); }
