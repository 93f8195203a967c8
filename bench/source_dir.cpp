// The repository root, for the benchmarks' Python baselines (bench/*.py). Kept in this one small
// file: a path in a heavy file's flags would make every fresh clone miss ccache for it.
#include "source_dir.h"

const char* zs_bench_source_dir() { return ZS_SOURCE_DIR; }
