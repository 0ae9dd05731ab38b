# Installs the sonic build tree into a scratch prefix, then configures, builds and runs a separate
# project (this directory) that finds it with find_package(sonic). Run by ctest as
#   cmake -DSONIC_BINARY_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=... -DCMAKE_GENERATOR=...
#         -P run_consumer_test.cmake
cmake_minimum_required(VERSION 3.24)

foreach(var SONIC_BINARY_DIR CONSUMER_SOURCE_DIR WORK_DIR CMAKE_GENERATOR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "consumer test: -D${var}=... is required")
  endif()
endforeach()

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")

# Runs one step; on failure prints its output and stops the test with a message naming the step.
function(run_step what)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out
    ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "consumer test: ${what} failed (exit ${rc})\n  command: ${cmd}\n${out}")
  endif()
  message(STATUS "consumer test: ${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

run_step("install sonic into ${prefix}"
  "${CMAKE_COMMAND}" --install "${SONIC_BINARY_DIR}" --prefix "${prefix}")

set(configure_args
  -S "${CONSUMER_SOURCE_DIR}" -B "${build}" -G "${CMAKE_GENERATOR}"
  "-DCMAKE_PREFIX_PATH=${prefix}"
  "-DSONIC_EXPECTED_PREFIX=${prefix}"
  -DCMAKE_BUILD_TYPE=Release
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF
  -DCMAKE_FIND_USE_SYSTEM_PACKAGE_REGISTRY=OFF)
# A sanitized libsonic needs its runtime first in the consumer's link too.
if(DEFINED SONIC_SANITIZE AND NOT "${SONIC_SANITIZE}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_CXX_FLAGS=-fsanitize=${SONIC_SANITIZE}"
       "-DCMAKE_C_FLAGS=-fsanitize=${SONIC_SANITIZE}")
endif()
if(DEFINED CMAKE_MAKE_PROGRAM AND NOT "${CMAKE_MAKE_PROGRAM}" STREQUAL "")
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}")
endif()
run_step("configure the consumer project" "${CMAKE_COMMAND}" ${configure_args})
run_step("build the consumer project" "${CMAKE_COMMAND}" --build "${build}")

# The executables run as built, with no LD_LIBRARY_PATH: they find the installed libsonic through
# the RPATH CMake gives them for the imported target.
foreach(exe sonic_consumer_cxx sonic_consumer_c)
  set(path "${build}/${exe}")
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "consumer test: the build did not produce ${path}")
  endif()
  run_step("run ${exe}" "${path}")
  message(STATUS "${step_output}")
endforeach()
