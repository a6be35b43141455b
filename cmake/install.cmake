# What `cmake --install` puts where (GNUInstallDirs), and the .deb that CPack
# makes of it: the programs, the libraries they load, the client's headers, a
# CMake package (find_package(gpubroker) -> gpubroker::client), gpubroker.pc
# for pkg-config, the systemd unit, its system user, an example config, the
# Prometheus and Grafana files and the .proto files.
include(CMakePackageConfigHelpers)

set(GPUBROKER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpubroker)
set(GPUBROKER_UNIT_DIR lib/systemd/system)
set(GPUBROKER_SYSUSERS_DIR lib/sysusers.d)
set(GPUBROKER_CONFIG_DIR ${CMAKE_INSTALL_FULL_SYSCONFDIR}/gpubroker)

# The demo pair (make demo) doubles as a smoke test of a node: a producer
# and a consumer that share a host-memory tensor through the daemon.
install(TARGETS gpubrokerd gpubroker gpubroker-demo-producer gpubroker-demo-consumer
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Libraries find each other in their own directory (see CMAKE_INSTALL_RPATH).
if(CMAKE_INSTALL_RPATH)
  set_target_properties(gpubroker_client PROPERTIES INSTALL_RPATH "$ORIGIN")
endif()
install(TARGETS gpubroker_client LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY client/include/gpubroker DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Shared libraries of our own that the programs and libgpubroker load. Which
# of the internal libraries are shared is the build's choice: install each
# one that is, and nothing a consumer links against directly.
foreach(lib IN ITEMS gpubroker_proto)
  if(TARGET ${lib})
    get_target_property(type ${lib} TYPE)
    if(type STREQUAL "SHARED_LIBRARY")
      if(CMAKE_INSTALL_RPATH)
        set_target_properties(${lib} PROPERTIES INSTALL_RPATH "$ORIGIN")
      endif()
      install(TARGETS ${lib} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} NAMELINK_SKIP)
    endif()
  endif()
endforeach()

# CMake package. Written out rather than exported: gpubroker::client is the
# shared library alone, whatever the internal libraries behind it are (an
# export would drag them, and gRPC and Protobuf, into every consumer).
set(GPUBROKER_LIBRARY_FILE
    ${CMAKE_SHARED_LIBRARY_PREFIX}gpubroker${CMAKE_SHARED_LIBRARY_SUFFIX}.${PROJECT_VERSION})
set(GPUBROKER_LIBRARY_SONAME
    ${CMAKE_SHARED_LIBRARY_PREFIX}gpubroker${CMAKE_SHARED_LIBRARY_SUFFIX}.0)
configure_package_config_file(cmake/gpubrokerConfig.cmake.in
  ${PROJECT_BINARY_DIR}/package/gpubrokerConfig.cmake INSTALL_DESTINATION ${GPUBROKER_CMAKE_DIR}
  PATH_VARS CMAKE_INSTALL_LIBDIR CMAKE_INSTALL_INCLUDEDIR)
# 0.x: a minor version may break the API.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/gpubrokerConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/gpubrokerConfig.cmake
              ${PROJECT_BINARY_DIR}/package/gpubrokerConfigVersion.cmake
        DESTINATION ${GPUBROKER_CMAKE_DIR})

# pkg-config.
configure_file(cmake/gpubroker.pc.in ${PROJECT_BINARY_DIR}/package/gpubroker.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/gpubroker.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# systemd: the unit names the daemon where it is installed (the file in the
# tree names /usr/bin, where the package puts it).
file(READ deploy/systemd/gpubroker.service _unit)
string(REPLACE "/usr/bin/gpubrokerd" "${CMAKE_INSTALL_FULL_BINDIR}/gpubrokerd" _unit "${_unit}")
string(REPLACE "/etc/gpubroker/" "${GPUBROKER_CONFIG_DIR}/" _unit "${_unit}")
string(REPLACE "/usr/share/doc/gpubroker/" "${CMAKE_INSTALL_FULL_DOCDIR}/" _unit "${_unit}")
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/package/gpubroker.service CONTENT "${_unit}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS deploy/systemd/gpubroker.service)
install(FILES ${PROJECT_BINARY_DIR}/package/gpubroker.service DESTINATION ${GPUBROKER_UNIT_DIR})
install(FILES deploy/systemd/gpubroker.sysusers DESTINATION ${GPUBROKER_SYSUSERS_DIR}
        RENAME gpubroker.conf)
install(FILES deploy/gpubroker.yaml DESTINATION ${GPUBROKER_CONFIG_DIR})
install(FILES README.md docs/architecture.md docs/configuration.md docs/grpc-clients.md
              docs/monitoring.md docs/operations.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES docs/images/dashboard.png DESTINATION ${CMAKE_INSTALL_DOCDIR}/images)

# What a node's operator and a client in another language need beside the
# programs: the alert rules and scrape configs, the Grafana dashboard, and the
# .proto files to generate stubs from (docs/grpc-clients.md).
set(GPUBROKER_DATA_DIR ${CMAKE_INSTALL_DATADIR}/gpubroker)
install(FILES deploy/prometheus/gpubroker-rules.yml deploy/prometheus/prometheus.yml
              deploy/prometheus/prometheus-kubernetes.yml
        DESTINATION ${GPUBROKER_DATA_DIR}/prometheus)
install(FILES deploy/grafana/gpubroker.json DESTINATION ${GPUBROKER_DATA_DIR}/grafana)
install(DIRECTORY proto/ DESTINATION ${GPUBROKER_DATA_DIR}/proto FILES_MATCHING PATTERN "*.proto")

include(cmake/package.cmake)
