// Precompiled for every test executable: the library and the test framework.
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include <dtrain/dtrain.hpp>
#include "support/backends.hpp"
