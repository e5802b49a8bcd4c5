// The target that precompiles catch.hpp for every unit test (see
// tests/CMakeLists.txt, REDIST_PCH): no tests of its own.
