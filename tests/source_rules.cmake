cmake_minimum_required(VERSION 3.22)
# Run by CTest (test source_rules): rules of the code that a compiler cannot check, each of which
# once broke a build that `make test` does not run.
# - LibTorch's version is asked only through engine/core/torch_compat.h (one place wraps what
#   differs between Debian's 1.13 and PyTorch 2.x), never with TORCH_VERSION_MAJOR/MINOR tests
#   scattered through the code.
# - Never std::filesystem::remove_all: the LibTorch of PyTorch's wheels exports its own copy of
#   libstdc++'s filesystem functions and its remove_all crashes when our code calls it (a crash
#   that only the PyTorch 2.x build shows); io::remove_tree does the same work.
# - Never at::parallel_for outside engine/core/parallel.cpp: in LibTorch's OpenMP builds (both of
#   ours) it goes parallel only in files compiled with -fopenmp, so everywhere else it silently ran
#   on one thread (the fused CPU AdamW did, until issue 38); zs::parallel_for (core/parallel.h).
file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/engine/*.cpp ${SOURCE_DIR}/engine/*.h ${SOURCE_DIR}/app/*.cpp ${SOURCE_DIR}/app/*.h
     ${SOURCE_DIR}/ui/*.cpp ${SOURCE_DIR}/ui/*.h ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.h
     ${SOURCE_DIR}/bench/*.cpp ${SOURCE_DIR}/bench/*.h)
set(problems "")
foreach(f ${sources})
  file(STRINGS ${SOURCE_DIR}/${f} lines)
  set(n 0)
  foreach(line IN LISTS lines)
    math(EXPR n "${n} + 1")
    string(REGEX REPLACE "//.*$" "" code "${line}")  # comments may name what they forbid
    if(code MATCHES "TORCH_VERSION_(MAJOR|MINOR|PATCH)" AND NOT f STREQUAL "engine/core/torch_compat.h")
      string(APPEND problems "${f}:${n}: a LibTorch version test outside engine/core/torch_compat.h; add a name there and use it\n")
    endif()
    if(code MATCHES "at::parallel_for[ \t]*\\(" AND NOT f STREQUAL "engine/core/parallel.cpp")
      string(APPEND problems "${f}:${n}: at::parallel_for runs on one thread outside engine/core/parallel.cpp (no -fopenmp); use zs::parallel_for (core/parallel.h)\n")
    endif()
    if(code MATCHES "remove_all[ \t]*\\(")
      string(APPEND problems "${f}:${n}: std::filesystem::remove_all crashes with PyTorch's LibTorch; use io::remove_tree (io/atomic_file.h)\n")
    endif()
  endforeach()
endforeach()
list(LENGTH sources count)
if(problems)
  message(FATAL_ERROR "source rules broken:\n${problems}")
endif()
message(STATUS "source rules hold in ${count} files")
