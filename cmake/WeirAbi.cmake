# SPDX-License-Identifier: Apache-2.0
# The ABI fingerprint of weir's public headers (docs/jobs.md, "The ABI gate").
#
# A job plugin calls into the weir it was compiled against through the
# structs, enums and prototypes of include/weir/*.h. If any of those headers
# changed, a plugin built against the old ones may read a struct at the wrong
# offset, so the loader refuses it. The fingerprint is SHA-256 over the list
# "<header name> <SHA-256 of its content>" of every public header, sorted by
# name, computed when CMake configures. Every header is a configure
# dependency, so editing one reconfigures and the fingerprint follows.
# The result goes into <build>/include/weir/abi.h, included by libweir (the
# host side of the gate) and by every plugin (the side it reports).

function(weir_abi_fingerprint out_var)
  file(GLOB headers "${PROJECT_SOURCE_DIR}/include/weir/*.h")
  list(SORT headers)
  set(manifest "")
  foreach(h ${headers})
    get_filename_component(name "${h}" NAME)
    file(SHA256 "${h}" sum)
    string(APPEND manifest "${name} ${sum}\n")
    set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${h}")
  endforeach()
  string(SHA256 fp "${manifest}")
  set(${out_var} "${fp}" PARENT_SCOPE)
endfunction()
