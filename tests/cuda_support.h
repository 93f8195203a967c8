#pragma once
// The CUDA twins of the tests: they skip where no CUDA device is usable (CI's machines), and
// fail instead when ZS_REQUIRE_CUDA is set (a GPU machine, where a skip would hide a broken path).

#include <QtTest>

#include "core/build_info.h"

#define ZS_REQUIRE_CUDA()                                                                            \
  do {                                                                                               \
    if (!zs::build_info().cuda_available) {                                                          \
      if (qEnvironmentVariableIsSet("ZS_REQUIRE_CUDA"))                                              \
        QFAIL("no usable CUDA device, and ZS_REQUIRE_CUDA is set (this build: " +                    \
              QByteArray(zs::build_info().cuda_compiled ? "CUDA paths built" : "no CUDA paths") + ")"); \
      QSKIP("no usable CUDA device (set ZS_REQUIRE_CUDA=1 on a GPU machine to make this a failure)"); \
    }                                                                                                \
  } while (0)
