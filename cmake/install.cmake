# install.cmake - what `cmake --install BUILD [--prefix P]` puts where, by
# GNUInstallDirs:
#
#   include/larder.h                    the public interface
#   lib/liblarder.so.X.Y.Z              the reader library (LARDER_VERSION_STRING),
#   lib/liblarder.so.0, lib/liblarder.so  its SONAME link and the link to link with
#   lib/pkgconfig/larder.pc             pkg-config --cflags --libs larder
#   bin/larder, bin/larderd             the programs (larderd runs as any user,
#                                       under srun too, so bin rather than sbin)
#   share/man/man1/larder.1, share/man/man8/larderd.8
#
# Not installed: include/larder_pack.h and the packing library.  larder_pack
# is a static library built on liblarder's internals (larder_static), not
# on its exported interface, so installing it would install those
# internals as well; C programs pack with `larder pack`.  Tests, fuzz
# targets, benchmarks and tools stay in the build tree.
include(GNUInstallDirs)

install(TARGETS larder LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/larder.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS larder_cli larderd RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The man pages are written by hand; only the version is filled in.
configure_file(${PROJECT_SOURCE_DIR}/man/larder.1.in man/larder.1 @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/man/larderd.8.in man/larderd.8 @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/man/larder.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_BINARY_DIR}/man/larderd.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)

# larder.pc must name the prefix of the install (`--prefix P` overrides the
# configured one), which is known only then: configuring fills in all but
# the prefix, leaving @PREFIX@ for the install step to replace.
set(larder_pc_prefix "@PREFIX@")
foreach(dir LIBDIR INCLUDEDIR)
  string(TOLOWER ${dir} name)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${dir}}")
    set(larder_pc_${name} "${CMAKE_INSTALL_${dir}}")
  else()
    set(larder_pc_${name} "\${prefix}/${CMAKE_INSTALL_${dir}}")
  endif()
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/larder.pc.in larder.pc.in @ONLY)
install(CODE "
  file(READ \"${PROJECT_BINARY_DIR}/larder.pc.in\" larder_pc)
  string(REPLACE \"@PREFIX@\" \"\${CMAKE_INSTALL_PREFIX}\" larder_pc \"\${larder_pc}\")
  file(WRITE \"${PROJECT_BINARY_DIR}/larder.pc\" \"\${larder_pc}\")")
install(FILES ${PROJECT_BINARY_DIR}/larder.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
