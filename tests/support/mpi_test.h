// Access to the process's dist::Runtime from tests built with the MPI main (mpi_main.cpp).
#pragma once

#include "dist/runtime.h"

namespace k3::test {

dist::Runtime& runtime();

}  // namespace k3::test
