# RedistFetch.cmake — fetch an NVIDIA redistrib release at configure time and
# define imported targets for what landed.
#
#   redist_fetch(<product>
#                VERSION <v>            # 9.27.0, 9.27, 9 or latest (required unless MANIFEST)
#                [CUDA <n>]             # CUDA major of the variant (redist fetch --cuda)
#                [COMPONENTS <c>...]    # default: every component of the release
#                [PLATFORM <p>]         # default: this machine's (linux-x86_64, ...)
#                [PREFIX <dir>]         # default: ${CMAKE_BINARY_DIR}/_redist/<product>
#                [BASE_URL <url>]       # default: $REDIST_BASE_URL, else NVIDIA's server
#                [MANIFEST <path|url>]  # a redistrib_<v>.json instead of resolving VERSION
#                [LOCKFILE <file>]      # passed as `redist fetch --locked <file>`
#                [TRUSTED_KEY <pem>...] # keys that sign a mirror's recompressed copies (--trusted-key)
#                [NAMESPACE <ns>]       # target namespace, default: upper-case product
#                [GLOBAL]               # make the imported targets IMPORTED_GLOBAL
#                [CHECK]                # fail the configure when the post-install checks fail
#                [WITH_DEPS])           # also what it needs of the CUDA toolkit (redist fetch --with-deps)
#
#   redist_fetch(FILE <redist.toml> [PLATFORM <p>] [LOCKED] [FROZEN] [GLOBAL])
#                                       # a whole project: `redist sync` (see the
#                                       # end of this file), targets for every product
#
# It runs `redist fetch` (execute_process) at configure time; a failure stops
# the configure with the tool's one-line error. Relative PREFIX is taken from
# the current binary dir; relative MANIFEST and LOCKFILE from the current
# source dir.
#
# Which `redist`: the REDIST_EXECUTABLE cache variable when set; else the tool
# installed with the redist CMake package (find_package(redist) loads this
# file and sets REDIST_BIN_DIR); else find_program(redist). When this file is
# include()d straight from a source checkout, set REDIST_EXECUTABLE (for
# example to <build>/bin/redist).
#
# Imported targets, one per library in <prefix>/lib (no special cases, so it
# works for every product):
#   lib<name>.so   -> <NS>::<name>  SHARED IMPORTED; IMPORTED_LOCATION is the
#                     real file behind the symlinks (lib<name>.so.9.27.0),
#                     IMPORTED_SONAME the name the symlink chain stops at
#                     before it (lib<name>.so.9), see _redist_fetch_soname().
#   lib<name>.a    -> <NS>::<name>  STATIC IMPORTED, unless lib<name>.so
#                     exists too.
# Every target gets INTERFACE_INCLUDE_DIRECTORIES <prefix>/include when that
# directory exists. For cuDNN: CUDNN::cudnn, CUDNN::cudnn_graph,
# CUDNN::cudnn_ops, ... For `cuda` the namespace is CUDA::, as with
# FindCUDAToolkit (CUDA::cudart, CUDA::cudart_static, ...): a target that
# already exists is left alone, so pass NAMESPACE to keep both apart.
#
# WITH_DEPS: `redist fetch --with-deps` also installs, into the same prefix,
# what the release needs of the `cuda` product (cuDNN: cuda_cudart, libcublas,
# cuda_nvrtc, and cuda_crt for CUDA 13; see `redist fetch --help`). The
# libraries of those components become CUDA:: targets (CUDA::cudart,
# CUDA::cublas, CUDA::cublasLt, CUDA::nvrtc, ...: their receipts say which),
# not <NS>:: ones, and every <NS>:: target links CUDA::cudart, CUDA::cublas,
# CUDA::cublasLt and CUDA::nvrtc where they exist: target_link_libraries(app
# PRIVATE CUDNN::cudnn) compiles against cudnn.h and the CUDA headers it
# includes, and links, with no CUDA toolkit on the machine.
#
# Variables set in the caller's scope (<NS> is the upper-case product):
#   <product>_ROOT, <NS>_ROOT   the prefix (find_package(<product>) and
#                               find_path()/find_library() hints)
#   <NS>_INCLUDE_DIR            <prefix>/include
#   <NS>_LIBRARY_DIR            <prefix>/lib
#   <NS>_VERSION                release label from the receipts ("9.27.0")
#   <NS>_TARGETS                the imported targets defined
#   CMAKE_PREFIX_PATH           the prefix appended (once)
#
# Re-configuring is (almost) free: after a successful fetch a stamp file in
# ${CMAKE_BINARY_DIR}/CMakeFiles/redist_fetch/ records the request (product,
# version, components, platform, cuda, base url, manifest, lockfile and the
# SHA-256 of local manifest/lock files, prefix) and the SHA-256 of each
# receipt the fetch left (<prefix>/.redist/receipts/<product>/<component>.json). When
# the next configure makes the same request and those receipts are unchanged,
# the tool is not run at all: no process, no manifest download. Any change
# (another version, a receipt removed or rewritten by `redist fetch/remove`)
# runs the tool again, which is itself a no-op when the receipts match. The
# stamp does not re-resolve a floating VERSION (9, latest): delete the stamp
# or set REDIST_FETCH_ALWAYS_RUN=ON to pick up a newer release. It does not
# check the installed files either; that is `redist verify --prefix <dir>`.
#
# Needs CMake 3.19 (string(JSON)).
include_guard(GLOBAL)

if(CMAKE_VERSION VERSION_LESS 3.19)
  message(FATAL_ERROR "RedistFetch.cmake needs CMake 3.19 or newer")
endif()

set(REDIST_FETCH_ALWAYS_RUN OFF CACHE BOOL
  "redist_fetch(): run the tool at every configure, ignoring the stamp files")

# Sets REDIST_EXECUTABLE (cache) to the redist tool, or fails the configure.
function(_redist_fetch_find_tool)
  if(REDIST_EXECUTABLE)
    if(NOT EXISTS "${REDIST_EXECUTABLE}")
      message(FATAL_ERROR "redist_fetch: REDIST_EXECUTABLE=${REDIST_EXECUTABLE} does not exist")
    endif()
    return()
  endif()
  # REDIST_BIN_DIR comes from redistConfig.cmake (the installed package).
  if(DEFINED REDIST_BIN_DIR AND EXISTS "${REDIST_BIN_DIR}/redist")
    set(REDIST_EXECUTABLE "${REDIST_BIN_DIR}/redist" CACHE FILEPATH "The redist tool used by redist_fetch()")
    return()
  endif()
  find_program(REDIST_EXECUTABLE NAMES redist DOC "The redist tool used by redist_fetch()")
  if(NOT REDIST_EXECUTABLE)
    message(FATAL_ERROR "redist_fetch: the redist tool was not found; set REDIST_EXECUTABLE "
      "(e.g. -DREDIST_EXECUTABLE=<redist build>/bin/redist) or use find_package(redist)")
  endif()
endfunction()

# The soname of a shared library reached through `link` (lib<name>.so): the
# symlink chain lib<name>.so -> lib<name>.so.9 -> lib<name>.so.9.27.0 ends at
# the real file, and the link just before it carries the soname (that is how
# ldconfig and the NVIDIA archives lay it out). Without such a link, a real
# file named lib<name>.so.<major>.<...> gives lib<name>.so.<major>. Otherwise
# empty. (CMake cannot read DT_SONAME itself; the linker still records the
# real one, this only feeds CMake's runtime-path bookkeeping.)
function(_redist_fetch_soname link out_var)
  get_filename_component(dir "${link}" DIRECTORY)
  get_filename_component(base "${link}" NAME)
  set(current "${link}")
  set(previous "")
  set(hops 0)
  while(IS_SYMLINK "${current}" AND hops LESS 16)
    file(READ_SYMLINK "${current}" target)
    if(NOT IS_ABSOLUTE "${target}")
      get_filename_component(cdir "${current}" DIRECTORY)
      set(target "${cdir}/${target}")
    endif()
    set(previous "${current}")
    set(current "${target}")
    math(EXPR hops "${hops} + 1")
  endwhile()
  set(soname "")
  if(previous AND NOT previous STREQUAL link)
    get_filename_component(soname "${previous}" NAME)
  else()
    get_filename_component(real_name "${current}" NAME)
    string(REGEX MATCH "^(.*\\.so\\.[0-9]+)(\\.[0-9.]+)?$" m "${real_name}")
    if(m)
      set(soname "${CMAKE_MATCH_1}")
    endif()
  endif()
  set(${out_var} "${soname}" PARENT_SCOPE)
endfunction()

# Receipts of `product` under prefix: "<sha256> <path>" lines in out_var, and
# the release label of the first in label_var. With components, only theirs.
function(_redist_fetch_receipts prefix product components out_var label_var)
  # receipts/<product>/<component>.json, and receipts/<component>.json as
  # redist before 0.2 wrote them.
  file(GLOB receipts LIST_DIRECTORIES false "${prefix}/.redist/receipts/${product}/*.json"
    "${prefix}/.redist/receipts/*.json")
  list(SORT receipts)
  set(lines "")
  set(label "")
  foreach(r IN LISTS receipts)
    get_filename_component(comp "${r}" NAME_WE)
    if(components AND NOT comp IN_LIST components)
      continue()
    endif()
    file(READ "${r}" text)
    string(JSON p ERROR_VARIABLE err GET "${text}" product)
    if(err OR NOT p STREQUAL product)
      continue()
    endif()
    if(NOT label)
      string(JSON label ERROR_VARIABLE err GET "${text}" release_label)
      if(err)
        set(label "")
      endif()
    endif()
    string(SHA256 h "${text}")
    string(APPEND lines "receipt ${h} ${r}\n")
  endforeach()
  set(${out_var} "${lines}" PARENT_SCOPE)
  set(${label_var} "${label}" PARENT_SCOPE)
endfunction()

# Defines <ns>::<name> for each lib<name>.so / lib<name>.a in `libs` (full
# paths under <prefix>/lib), as described at the top; the names in out_var.
function(_redist_fetch_define_targets prefix ns global libs out_var)
  set(targets "")
  set(include_dir "${prefix}/include")
  set(shared_libs "")
  set(static_libs "")
  foreach(lib IN LISTS libs)
    if(lib MATCHES "\\.so$")
      list(APPEND shared_libs "${lib}")
    elseif(lib MATCHES "\\.a$")
      list(APPEND static_libs "${lib}")
    endif()
  endforeach()
  list(SORT shared_libs)
  list(SORT static_libs)
  set(shared_names "")
  foreach(lib IN LISTS shared_libs static_libs)
    get_filename_component(file_name "${lib}" NAME)
    if(file_name MATCHES "^lib(.+)\\.so$")
      set(kind SHARED)
      set(name "${CMAKE_MATCH_1}")
      list(APPEND shared_names "${name}")
    elseif(file_name MATCHES "^lib(.+)\\.a$")
      set(kind STATIC)
      set(name "${CMAKE_MATCH_1}")
      if(name IN_LIST shared_names)
        continue()
      endif()
    else()
      continue()
    endif()
    if(NOT name MATCHES "^[A-Za-z0-9_.+-]+$" OR NOT EXISTS "${lib}")
      continue()
    endif()
    set(target "${ns}::${name}")
    if(TARGET "${target}")
      list(APPEND targets "${target}")
      continue()
    endif()
    if(global)
      add_library("${target}" ${kind} IMPORTED GLOBAL)
    else()
      add_library("${target}" ${kind} IMPORTED)
    endif()
    file(REAL_PATH "${lib}" real)
    set_target_properties("${target}" PROPERTIES IMPORTED_LOCATION "${real}")
    if(kind STREQUAL "SHARED")
      _redist_fetch_soname("${lib}" soname)
      if(soname)
        set_target_properties("${target}" PROPERTIES IMPORTED_SONAME "${soname}")
      endif()
    endif()
    if(IS_DIRECTORY "${include_dir}")
      set_target_properties("${target}" PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${include_dir}")
    endif()
    list(APPEND targets "${target}")
  endforeach()
  set(${out_var} "${targets}" PARENT_SCOPE)
endfunction()

# The libraries (<prefix>/lib/lib*.so and lib*.a, full paths) that the
# receipts of `product` under prefix list, in out_var.
function(_redist_fetch_receipt_libs prefix product out_var)
  file(GLOB receipts LIST_DIRECTORIES false "${prefix}/.redist/receipts/${product}/*.json")
  set(libs "")
  foreach(r IN LISTS receipts)
    file(READ "${r}" text)
    string(JSON n ERROR_VARIABLE err LENGTH "${text}" files)
    if(err OR n EQUAL 0)
      continue()
    endif()
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON path ERROR_VARIABLE err GET "${text}" files ${i} path)
      if(NOT err AND path MATCHES "^lib/lib[A-Za-z0-9_.+-]+\\.(so|a)$")
        list(APPEND libs "${prefix}/${path}")
      endif()
    endforeach()
  endforeach()
  set(${out_var} "${libs}" PARENT_SCOPE)
endfunction()

function(redist_fetch product)
  if(product STREQUAL "FILE")
    _redist_fetch_project(${ARGN})
    foreach(var IN LISTS _redist_fetch_project_vars)
      set(${var} "${${var}}" PARENT_SCOPE)
    endforeach()
    set(CMAKE_PREFIX_PATH "${CMAKE_PREFIX_PATH}" PARENT_SCOPE)
    return()
  endif()
  cmake_parse_arguments(PARSE_ARGV 1 arg "GLOBAL;CHECK;WITH_DEPS"
    "VERSION;CUDA;PLATFORM;PREFIX;BASE_URL;MANIFEST;LOCKFILE;NAMESPACE" "COMPONENTS;TRUSTED_KEY")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "redist_fetch(${product}): unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT product MATCHES "^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    message(FATAL_ERROR "redist_fetch: bad product name '${product}'")
  endif()
  if(NOT arg_VERSION AND NOT arg_MANIFEST)
    message(FATAL_ERROR "redist_fetch(${product}): VERSION (or MANIFEST) is required")
  endif()
  if(NOT arg_PREFIX)
    set(arg_PREFIX "${CMAKE_BINARY_DIR}/_redist/${product}")
  endif()
  get_filename_component(prefix "${arg_PREFIX}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  string(TOUPPER "${product}" upper)
  string(MAKE_C_IDENTIFIER "${upper}" upper)
  if(arg_NAMESPACE)
    set(ns "${arg_NAMESPACE}")
  else()
    set(ns "${upper}")
  endif()

  # A MANIFEST or LOCKFILE that is a local file takes part in the request by
  # content: editing it must refetch.
  set(manifest "${arg_MANIFEST}")
  set(manifest_hash "")
  if(manifest AND NOT manifest MATCHES "^[A-Za-z][A-Za-z0-9+.-]*://")
    get_filename_component(manifest "${manifest}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(EXISTS "${manifest}")
      file(SHA256 "${manifest}" manifest_hash)
    endif()
  endif()
  set(lockfile "")
  set(lockfile_hash "")
  if(arg_LOCKFILE)
    get_filename_component(lockfile "${arg_LOCKFILE}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    if(EXISTS "${lockfile}")
      file(SHA256 "${lockfile}" lockfile_hash)
    endif()
  endif()
  set(components ${arg_COMPONENTS})
  list(JOIN components "," components_csv)
  # Relative key files are taken from the current source dir, like LOCKFILE.
  set(trusted_keys "")
  foreach(key IN LISTS arg_TRUSTED_KEY)
    get_filename_component(key "${key}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND trusted_keys "${key}")
  endforeach()

  set(request "redist_fetch stamp v1\n")
  foreach(field IN ITEMS product prefix components_csv manifest manifest_hash lockfile lockfile_hash)
    string(APPEND request "${field}=${${field}}\n")
  endforeach()
  foreach(field IN ITEMS VERSION CUDA PLATFORM BASE_URL)
    string(APPEND request "${field}=${arg_${field}}\n")
  endforeach()
  if(arg_CHECK)  # only when set, so that existing stamps stay valid
    string(APPEND request "CHECK=ON\n")
  endif()
  if(trusted_keys)  # likewise
    string(APPEND request "TRUSTED_KEY=${trusted_keys}\n")
  endif()
  if(arg_WITH_DEPS)  # likewise
    string(APPEND request "WITH_DEPS=ON\n")
  endif()
  string(SHA256 prefix_hash "${prefix}")
  string(SUBSTRING "${prefix_hash}" 0 12 prefix_hash)
  set(stamp "${CMAKE_BINARY_DIR}/CMakeFiles/redist_fetch/${product}-${prefix_hash}.stamp")

  # Fast path: same request, receipts unchanged -> nothing to do.
  set(up_to_date FALSE)
  if(NOT REDIST_FETCH_ALWAYS_RUN AND EXISTS "${stamp}")
    file(READ "${stamp}" old)
    _redist_fetch_receipts("${prefix}" "${product}" "${components}" receipts label)
    if(arg_WITH_DEPS AND receipts)  # the dependencies' receipts take part: removing one refetches
      _redist_fetch_receipts("${prefix}" cuda "" dep_receipts dep_label)
      string(APPEND receipts "${dep_receipts}")
    endif()
    if(receipts AND old STREQUAL "${request}${receipts}")
      set(up_to_date TRUE)
    endif()
  endif()

  if(up_to_date)
    message(STATUS "redist_fetch(${product}): up to date in ${prefix} (stamp ${stamp})")
  else()
    _redist_fetch_find_tool()
    set(cmd "${REDIST_EXECUTABLE}" fetch "${product}")
    if(arg_VERSION)
      list(APPEND cmd "${arg_VERSION}")
    endif()
    list(APPEND cmd --prefix "${prefix}" --quiet)
    if(components)
      list(APPEND cmd --component "${components_csv}")
    endif()
    if(arg_PLATFORM)
      list(APPEND cmd --platform "${arg_PLATFORM}")
    endif()
    if(arg_CUDA)
      list(APPEND cmd --cuda "${arg_CUDA}")
    endif()
    if(arg_BASE_URL)
      list(APPEND cmd --base-url "${arg_BASE_URL}")
    endif()
    if(manifest)
      list(APPEND cmd --manifest "${manifest}")
    endif()
    if(lockfile)
      list(APPEND cmd --locked "${lockfile}")
    endif()
    foreach(key IN LISTS trusted_keys)
      list(APPEND cmd --trusted-key "${key}")
    endforeach()
    # CHECK: `redist fetch --check` makes a failed post-install check (a
    # missing dependency, a library that does not load, mixed versions, a
    # driver too old for the variant: see `redist check --help`) exit 11,
    # and the configure stops with its first finding.
    if(arg_CHECK)
      list(APPEND cmd --check)
    endif()
    if(arg_WITH_DEPS)
      list(APPEND cmd --with-deps)
    endif()
    message(STATUS "redist_fetch(${product}): running ${REDIST_EXECUTABLE} fetch into ${prefix}")
    file(REMOVE "${stamp}")
    execute_process(COMMAND ${cmd}
      RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      # The tool prints a one-line error (exit codes: `redist fetch --help`).
      string(STRIP "${err}" err)
      string(REGEX REPLACE "\n.*" "" first_line "${err}")
      if(NOT first_line)
        set(first_line "redist fetch failed with ${rc}")
      endif()
      list(JOIN cmd " " cmd_text)
      message(FATAL_ERROR "redist_fetch(${product}): ${first_line}\n"
        "  exit code: ${rc}\n  command: ${cmd_text}")
    endif()
    _redist_fetch_receipts("${prefix}" "${product}" "${components}" receipts label)
    if(arg_WITH_DEPS AND receipts)
      _redist_fetch_receipts("${prefix}" cuda "" dep_receipts dep_label)
      string(APPEND receipts "${dep_receipts}")
    endif()
    if(receipts)
      file(WRITE "${stamp}" "${request}${receipts}")
    else()
      message(WARNING "redist_fetch(${product}): no receipt for ${product} under "
        "${prefix}/.redist/receipts; re-configure will run the tool again")
    endif()
  endif()

  # Imported targets from the tree.
  set(include_dir "${prefix}/include")
  set(library_dir "${prefix}/lib")
  file(GLOB shared_libs LIST_DIRECTORIES false "${library_dir}/lib*.so")
  file(GLOB static_libs LIST_DIRECTORIES false "${library_dir}/lib*.a")
  set(libs ${shared_libs} ${static_libs})
  set(dep_targets "")
  if(arg_WITH_DEPS AND NOT product STREQUAL "cuda")
    # The dependencies' libraries are CUDA::'s, not this product's.
    _redist_fetch_receipt_libs("${prefix}" cuda dep_libs)
    if(dep_libs)
      list(REMOVE_ITEM libs ${dep_libs})
      _redist_fetch_define_targets("${prefix}" CUDA "${arg_GLOBAL}" "${dep_libs}" dep_targets)
    endif()
  endif()
  _redist_fetch_define_targets("${prefix}" "${ns}" "${arg_GLOBAL}" "${libs}" targets)
  # What a program of the product links of them (FindCUDAToolkit's names);
  # the headers come with the prefix's include directory.
  set(dep_links "")
  foreach(name IN ITEMS cudart cublas cublasLt nvrtc)
    if("CUDA::${name}" IN_LIST dep_targets)
      list(APPEND dep_links "CUDA::${name}")
    endif()
  endforeach()
  if(dep_links)
    foreach(target IN LISTS targets)
      set_property(TARGET "${target}" APPEND PROPERTY INTERFACE_LINK_LIBRARIES ${dep_links})
    endforeach()
  endif()

  set(prefix_path ${CMAKE_PREFIX_PATH})
  if(NOT prefix IN_LIST prefix_path)
    list(APPEND prefix_path "${prefix}")
  endif()
  set(CMAKE_PREFIX_PATH "${prefix_path}" PARENT_SCOPE)
  set(${product}_ROOT "${prefix}" PARENT_SCOPE)
  set(${upper}_ROOT "${prefix}" PARENT_SCOPE)
  set(${upper}_INCLUDE_DIR "${include_dir}" PARENT_SCOPE)
  set(${upper}_LIBRARY_DIR "${library_dir}" PARENT_SCOPE)
  set(${upper}_VERSION "${label}" PARENT_SCOPE)
  set(${upper}_TARGETS "${targets}" PARENT_SCOPE)
endfunction()

# redist_fetch(FILE <redist.toml> [PLATFORM <p>] [LOCKED] [FROZEN] [GLOBAL])
#
# Runs `redist sync --file <redist.toml> --json` (with --locked: fail when
# redist.lock is out of date with the file; --frozen: install the lock
# unchecked) at configure time: every product of the project file lands in
# its prefix in one transaction, and redist.lock (authoritative: the locked
# releases are kept) is written beside the file (see `redist sync --help`). Then, per product, the libraries its receipts list directly
# in <prefix>/lib become targets as above, in the upper-case product's
# namespace (CUDNN::cudnn, NCCL::nccl, CUDA::cudart, ...): only that product's
# libraries, though all share one prefix. Variables, per product <NS>:
# <NS>_ROOT, <NS>_INCLUDE_DIR, <NS>_LIBRARY_DIR, <NS>_VERSION, <NS>_TARGETS;
# REDIST_PROJECT_PREFIX and REDIST_PROJECT_PRODUCTS; CMAKE_PREFIX_PATH gets
# the prefix. A relative FILE is taken from the current source dir. A product
# with `deps = true` links the CUDA:: targets of the cuda product's libraries
# it needs (CUDA::cudart, CUDA::cublas, CUDA::cublasLt, CUDA::nvrtc), as
# WITH_DEPS above.
#
# Re-configuring: the tool's JSON is kept in a stamp with the SHA-256 of the
# project file, of redist.lock and of every receipt in the prefix; while all
# are unchanged, the tool is not run.
function(_redist_fetch_project file)
  cmake_parse_arguments(PARSE_ARGV 1 arg "GLOBAL;LOCKED;FROZEN" "PLATFORM" "")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "redist_fetch(FILE ${file}): unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  get_filename_component(file "${file}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "redist_fetch(FILE ${file}): no such file")
  endif()
  get_filename_component(dir "${file}" DIRECTORY)
  set(lock "${dir}/redist.lock")
  file(SHA256 "${file}" file_hash)
  set(lock_hash "")
  if(EXISTS "${lock}")
    file(SHA256 "${lock}" lock_hash)
  endif()
  set(request "redist_fetch project stamp v1\nfile=${file}\nfile_hash=${file_hash}\nlock_hash=${lock_hash}\n")
  string(APPEND request "PLATFORM=${arg_PLATFORM}\nLOCKED=${arg_LOCKED}\nFROZEN=${arg_FROZEN}\n")
  string(SHA256 file_key "${file}")
  string(SUBSTRING "${file_key}" 0 12 file_key)
  set(stamp "${CMAKE_BINARY_DIR}/CMakeFiles/redist_fetch/project-${file_key}.stamp")
  set(stamp_json "${CMAKE_BINARY_DIR}/CMakeFiles/redist_fetch/project-${file_key}.json")

  set(json "")
  if(NOT REDIST_FETCH_ALWAYS_RUN AND EXISTS "${stamp}" AND EXISTS "${stamp_json}")
    file(READ "${stamp_json}" old_json)
    string(JSON old_prefix ERROR_VARIABLE err GET "${old_json}" prefix)
    if(NOT err)
      _redist_fetch_all_receipts("${old_prefix}" receipts)
      file(READ "${stamp}" old)
      if(receipts AND old STREQUAL "${request}${receipts}")
        set(json "${old_json}")
        message(STATUS "redist_fetch(FILE ${file}): up to date in ${old_prefix}")
      endif()
    endif()
  endif()

  if(NOT json)
    _redist_fetch_find_tool()
    set(cmd "${REDIST_EXECUTABLE}" sync --file "${file}" --json)
    if(arg_PLATFORM)
      list(APPEND cmd --platform "${arg_PLATFORM}")
    endif()
    # One of the two (redist refuses both): FROZEN installs the lock unchecked,
    # LOCKED first checks it against the project file.
    if(arg_FROZEN)
      list(APPEND cmd --frozen)
    elseif(arg_LOCKED)
      list(APPEND cmd --locked)
    endif()
    message(STATUS "redist_fetch(FILE ${file}): running ${REDIST_EXECUTABLE} sync")
    file(REMOVE "${stamp}")
    execute_process(COMMAND ${cmd} RESULT_VARIABLE rc OUTPUT_VARIABLE json ERROR_VARIABLE err)
    if(NOT rc EQUAL 0)
      string(STRIP "${err}" err)
      string(REGEX REPLACE "\n.*" "" first_line "${err}")
      if(NOT first_line)
        set(first_line "redist sync failed with ${rc}")
      endif()
      list(JOIN cmd " " cmd_text)
      message(FATAL_ERROR "redist_fetch(FILE ${file}): ${first_line}\n  exit code: ${rc}\n  command: ${cmd_text}")
    endif()
    string(JSON prefix GET "${json}" prefix)
    # The lock may have been (re)written by this run: stamp its new hash.
    set(lock_hash "")
    if(EXISTS "${lock}")
      file(SHA256 "${lock}" lock_hash)
    endif()
    set(request "redist_fetch project stamp v1\nfile=${file}\nfile_hash=${file_hash}\nlock_hash=${lock_hash}\n")
    string(APPEND request "PLATFORM=${arg_PLATFORM}\nLOCKED=${arg_LOCKED}\nFROZEN=${arg_FROZEN}\n")
    _redist_fetch_all_receipts("${prefix}" receipts)
    file(WRITE "${stamp_json}" "${json}")
    file(WRITE "${stamp}" "${request}${receipts}")
  endif()

  string(JSON prefix GET "${json}" prefix)
  string(JSON count LENGTH "${json}" products)
  set(with_deps "")
  set(vars REDIST_PROJECT_PREFIX REDIST_PROJECT_PRODUCTS)
  set(REDIST_PROJECT_PREFIX "${prefix}" PARENT_SCOPE)
  set(names "")
  if(count GREATER 0)
    math(EXPR last "${count} - 1")
    foreach(i RANGE ${last})
      string(JSON name GET "${json}" products ${i} name)
      string(JSON label GET "${json}" products ${i} release_label)
      string(JSON nlibs LENGTH "${json}" products ${i} libraries)
      set(libs "")
      if(nlibs GREATER 0)
        math(EXPR lastlib "${nlibs} - 1")
        foreach(j RANGE ${lastlib})
          string(JSON lib GET "${json}" products ${i} libraries ${j})
          list(APPEND libs "${prefix}/${lib}")
        endforeach()
      endif()
      string(TOUPPER "${name}" upper)
      string(MAKE_C_IDENTIFIER "${upper}" upper)
      _redist_fetch_define_targets("${prefix}" "${upper}" "${arg_GLOBAL}" "${libs}" targets)
      string(JSON deps ERROR_VARIABLE err GET "${json}" products ${i} deps)
      if(NOT err AND deps)
        list(APPEND with_deps ${targets})
      endif()
      list(APPEND names "${name}")
      set(${upper}_ROOT "${prefix}" PARENT_SCOPE)
      set(${upper}_INCLUDE_DIR "${prefix}/include" PARENT_SCOPE)
      set(${upper}_LIBRARY_DIR "${prefix}/lib" PARENT_SCOPE)
      set(${upper}_VERSION "${label}" PARENT_SCOPE)
      set(${upper}_TARGETS "${targets}" PARENT_SCOPE)
      list(APPEND vars ${upper}_ROOT ${upper}_INCLUDE_DIR ${upper}_LIBRARY_DIR ${upper}_VERSION ${upper}_TARGETS)
    endforeach()
  endif()
  # deps = true: the product's targets link what it needs of the cuda
  # product (its CUDA:: targets, defined above), as WITH_DEPS does.
  foreach(target IN LISTS with_deps)
    foreach(name IN ITEMS cudart cublas cublasLt nvrtc)
      if(TARGET "CUDA::${name}")
        set_property(TARGET "${target}" APPEND PROPERTY INTERFACE_LINK_LIBRARIES "CUDA::${name}")
      endif()
    endforeach()
  endforeach()
  set(REDIST_PROJECT_PRODUCTS "${names}" PARENT_SCOPE)
  set(prefix_path ${CMAKE_PREFIX_PATH})
  if(NOT prefix IN_LIST prefix_path)
    list(APPEND prefix_path "${prefix}")
  endif()
  set(CMAKE_PREFIX_PATH "${prefix_path}" PARENT_SCOPE)
  set(_redist_fetch_project_vars "${vars}" PARENT_SCOPE)
endfunction()

# "receipt <sha256> <path>" lines for every receipt under prefix.
function(_redist_fetch_all_receipts prefix out_var)
  file(GLOB_RECURSE receipts LIST_DIRECTORIES false "${prefix}/.redist/receipts/*.json")
  list(SORT receipts)
  set(lines "")
  foreach(r IN LISTS receipts)
    file(SHA256 "${r}" h)
    string(APPEND lines "receipt ${h} ${r}\n")
  endforeach()
  set(${out_var} "${lines}" PARENT_SCOPE)
endfunction()
