# `cmake --install BUILD [--prefix DIR]`: the CLI, libqasr.so with the public headers, a pkg-config file and a CMake
# package (find_package(qasr) → qasr::qasr). tests/e2e/install_consumer.sh builds programs against an install.
include(CMakePackageConfigHelpers)

install(TARGETS qasr RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# the optional modules, where the CLI and libqasr.so look for them (core/module.hpp)
foreach(m qasr_ffmpeg qasr_capture)
  if(TARGET ${m})
    install(TARGETS ${m} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/qasr)
  endif()
endforeach()
if(NOT QASR_SHARED)
  message(STATUS "qasr: QASR_SHARED=OFF — `cmake --install` installs the CLI only (no library, headers or packages)")
  return()
endif()
install(TARGETS qasr_shared EXPORT qasrTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/qasr/qasr.h ${PROJECT_SOURCE_DIR}/include/qasr/qasr.hpp
  ${PROJECT_SOURCE_DIR}/include/qasr/error.hpp
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/qasr)
install(EXPORT qasrTargets NAMESPACE qasr:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qasr)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/qasrConfig.cmake.in
  ${PROJECT_BINARY_DIR}/qasrConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qasr)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/qasrConfigVersion.cmake COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/qasrConfig.cmake ${PROJECT_BINARY_DIR}/qasrConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/qasr)
# pkg-config, relocatable (the prefix found from the .pc file's own place, so `--prefix` at install time holds)
file(RELATIVE_PATH QASR_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
configure_file(${PROJECT_SOURCE_DIR}/cmake/qasr.pc.in ${PROJECT_BINARY_DIR}/qasr.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/qasr.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
