#define BOOST_TEST_MODULE dtrain
#include <boost/test/unit_test.hpp>
