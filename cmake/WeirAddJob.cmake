# SPDX-License-Identifier: Apache-2.0
# weir_add_job(NAME SOURCES...): build a job plugin, NAME.so, from SOURCES.
#
# A plugin is a MODULE library compiled against weir's headers and NOT
# linked with libweir: its weir_* calls stay undefined and are bound, when
# the plugin is dlopen'd, to the one libweir inside the process that loads it
# (the weir command exports all of libweir), so the plugin and the host share
# one runtime and one copy of every piece of library state. Symbols are
# hidden by default; WEIR_REGISTER_JOB marks the handshake functions the
# loader looks up. The plugin gets the sanitizer flags weir itself was
# built with, because the loader refuses a plugin whose instrumentation
# differs (docs/jobs.md, "The ABI gate").
#
# weir_link_host(TARGET): make the executable TARGET a host that loads job
# plugins (the weir command, tests/job/test_job): it links all of libweir,
# not just the objects it calls itself, and exports every symbol, so any
# weir_* function a plugin calls is there to bind to.
#
# Used in-tree and from the installed package (find_package(weir) includes
# this file through weirConfig.cmake), so both build plugins and hosts the
# same way. The caller provides the weir::job and weir::weir targets.

function(weir_add_job name)
  if(NOT ARGN)
    message(FATAL_ERROR "weir_add_job(${name}): no sources")
  endif()
  add_library(${name} MODULE ${ARGN})
  target_link_libraries(${name} PRIVATE weir::job)
  set_target_properties(${name} PROPERTIES PREFIX "" C_VISIBILITY_PRESET hidden
                                           POSITION_INDEPENDENT_CODE ON)
endfunction()

function(weir_link_host target)
  if(CMAKE_VERSION VERSION_LESS 3.24)
    message(FATAL_ERROR "weir_link_host needs CMake 3.24 ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>)")
  endif()
  set_target_properties(${target} PROPERTIES ENABLE_EXPORTS ON)
  # weir::job: the sanitizer flags libweir was built with, for the link.
  target_link_libraries(${target} PRIVATE weir::job "$<LINK_LIBRARY:WHOLE_ARCHIVE,weir::weir>")
endfunction()
