# Debian's libpcre2-dev ships pkg-config files but no CMake package; this module wraps them
# so the rest of the build can use find_package(PCRE2) and the PCRE2::pcre2-8 target.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PC_PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PCRE2 REQUIRED_VARS PC_PCRE2_FOUND VERSION_VAR PC_PCRE2_VERSION)
if(PCRE2_FOUND AND NOT TARGET PCRE2::pcre2-8)
  add_library(PCRE2::pcre2-8 INTERFACE IMPORTED)
  target_link_libraries(PCRE2::pcre2-8 INTERFACE PkgConfig::PC_PCRE2)
  target_compile_definitions(PCRE2::pcre2-8 INTERFACE PCRE2_CODE_UNIT_WIDTH=8)
endif()
