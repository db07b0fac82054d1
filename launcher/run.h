// `launch [options] PROGRAM [ARGS...]`: everything main() does, errors turned into exit codes in
// this one place (2: bad input, nothing started; 1: the launcher itself failed; else the job's).
#pragma once

namespace launch {

int run(int argc, char** argv);

}  // namespace launch
