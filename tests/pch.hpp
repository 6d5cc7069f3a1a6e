// The test sources' precompiled header (tests/CMakeLists.txt, ATTNLAB_PCH): what most of them
// include, parsed once per build instead of once per file. A test file still includes what it
// uses; this header only makes those includes cheap. It holds no header with namespace-scope
// objects (CLI11's validators would be compiled again into every test file).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "attnlab.hpp"
