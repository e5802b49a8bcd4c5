# Warnings for every target of this project, set in one place.
function(redist_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor)
  if(REDIST_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
