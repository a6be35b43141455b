# `cpack -G DEB` in a build configured with -DCMAKE_INSTALL_PREFIX=/usr (see
# `make deb`): one package with the daemon, the CLI, libgpubroker, its headers,
# the CMake and pkg-config files, the unit, the example config, the Python
# package, the Prometheus and Grafana files and the .proto files. Its
# dependencies come from dpkg-shlibdeps, so they name the libraries of the
# release it was built on.
set(CPACK_PACKAGE_NAME gpubroker)
set(CPACK_PACKAGE_VENDOR gpubroker)
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Per-node GPU memory broker: share GPU buffers between processes")
string(CONCAT CPACK_PACKAGE_DESCRIPTION
  "gpubrokerd owns the GPU (or host) memory of a node and lends buffers to client processes\n"
  "through file descriptors, with leases, tenants, quotas, reclaim of dead clients and\n"
  "Prometheus metrics. This package has the daemon, its systemd unit, the gpubroker CLI,\n"
  "libgpubroker (C++ API and C ABI) with its headers, the Python package, Prometheus\n"
  "alert rules, a Grafana dashboard, and the .proto files for clients in other languages.")
set(CPACK_PACKAGE_CONTACT "gpubroker maintainers <maintainers@gpubroker.invalid>")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# useradd, groupadd (postinst).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "passwd")
# The Python package in it runs on the system's python3 (numpy for arrays).
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3-numpy")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(_debian ${PROJECT_BINARY_DIR}/package/debian)
file(MAKE_DIRECTORY ${_debian})
foreach(script IN ITEMS postinst prerm postrm)
  file(COPY deploy/debian/${script} DESTINATION ${_debian}
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                        WORLD_READ WORLD_EXECUTE)
endforeach()
# Files under /etc are the operator's: dpkg keeps their edits on upgrade.
file(WRITE ${_debian}/conffiles "${GPUBROKER_CONFIG_DIR}/gpubroker.yaml\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${_debian}/postinst ${_debian}/prerm ${_debian}/postrm ${_debian}/conffiles)

include(CPack)
