// redist/export.hpp — which symbols libredist.so exports: the public API only.
//
// The library is compiled with -fvisibility=hidden -fvisibility-inlines-hidden
// (CMakeLists.txt), so nothing it defines is visible outside libredist.so
// unless it is declared in a public header (include/redist/*.hpp). Each public
// header marks its whole declaration block, just inside `namespace redist {`:
//
//   namespace redist {
//   REDIST_API_BEGIN
//   ... declarations ...
//   REDIST_API_END
//   }  // namespace redist
//
// One pair per header rather than a macro on every declaration: the
// boundary is the header, so a declaration added to a public header is
// exported and one added to an internal header (lib/<layer>/) is not, with
// nothing to forget. Classes declared there get default visibility, so
// their type_info and vtables are shared with the program (an exception
// or a dynamic_cast crosses libredist.so). REDIST_API marks a single
// declaration outside such a block.
//
// The static library (libredist.a) is built from the same objects: hidden
// visibility changes nothing for a program that links it.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define REDIST_API __attribute__((visibility("default")))
#define REDIST_API_BEGIN _Pragma("GCC visibility push(default)")
#define REDIST_API_END _Pragma("GCC visibility pop")
#else
#define REDIST_API
#define REDIST_API_BEGIN
#define REDIST_API_END
#endif
