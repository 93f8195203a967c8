#pragma once

/// The repository root (where bench/*.py live).
const char* zs_bench_source_dir();
