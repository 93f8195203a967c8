cmake_minimum_required(VERSION 3.22)  # IN_LIST
# Run by CTest: every test function of test TEST in suite EXE (its -functions list) must be in FUNCTIONS, the
# union of the parts a split test runs, and every listed function must exist; otherwise a new
# test function would never run, or a renamed one would fail to match.
execute_process(COMMAND ${EXE} ${TEST} -functions OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${EXE} -functions failed (${rc}):\n${out}")
endif()
string(REGEX MATCHALL "[A-Za-z0-9_]+\\(\\)" found "${out}")
set(names)
foreach(f ${found})
  string(REPLACE "()" "" f "${f}")
  list(APPEND names ${f})
  if(NOT f IN_LIST FUNCTIONS)
    message(FATAL_ERROR "${EXE}: test function ${f} is in no part; add it to a part in tests/CMakeLists.txt")
  endif()
endforeach()
foreach(f ${FUNCTIONS})
  if(NOT f IN_LIST names)
    message(FATAL_ERROR "${EXE}: tests/CMakeLists.txt lists ${f}, which is not a test function")
  endif()
endforeach()
list(LENGTH names n)
message(STATUS "${EXE}: all ${n} test functions are in a part")
