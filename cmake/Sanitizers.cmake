# Sanitizer builds, set in one place: -DREDIST_SANITIZE=address,undefined or
# -DREDIST_SANITIZE=thread (see the asan and tsan presets in CMakePresets.json).
#
# The flags go on every target of this tree (library, tools, unit tests), so
# that the tools the e2e suite runs are the instrumented ones too. The system
# libraries (libcurl, libarchive, liblzma, simdjson) stay uninstrumented; the
# sanitizer runtimes intercept their allocations and pthread calls.
#
# The libFuzzer targets (tests/fuzz/) are built by clang++ with their own
# -fsanitize=fuzzer,address,undefined and are independent of this option.
set(REDIST_SANITIZE "" CACHE STRING
  "Sanitizers for every target: empty, address,undefined (ASan+UBSan) or thread (TSan)")
set_property(CACHE REDIST_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")

if(REDIST_SANITIZE)
  string(REPLACE "," ";" _redist_sanitizers "${REDIST_SANITIZE}")
  foreach(_s ${_redist_sanitizers})
    if(NOT _s MATCHES "^(address|undefined|thread)$")
      message(FATAL_ERROR "REDIST_SANITIZE: unknown sanitizer '${_s}' (address, undefined, thread)")
    endif()
  endforeach()
  if("thread" IN_LIST _redist_sanitizers AND "address" IN_LIST _redist_sanitizers)
    message(FATAL_ERROR "REDIST_SANITIZE: thread cannot be combined with address")
  endif()

  # -fno-omit-frame-pointer: readable stacks from the fast unwinder.
  # -fno-sanitize-recover=undefined: UB aborts the process (non-zero exit)
  # instead of printing and going on, so a test cannot pass over it.
  set(_redist_san_flags -fsanitize=${REDIST_SANITIZE} -fno-omit-frame-pointer)
  if("undefined" IN_LIST _redist_sanitizers)
    list(APPEND _redist_san_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_redist_san_flags})
  add_link_options(-fsanitize=${REDIST_SANITIZE})
  message(STATUS "redist: building with -fsanitize=${REDIST_SANITIZE}")
endif()
