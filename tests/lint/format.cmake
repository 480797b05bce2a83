# Format lint (docs/development.md): every C++ file of the project as `.clang-format` at the root
# formats it, checked with Debian 12's clang-format (14). Lists the files that would change; fix them
# with `clang-format -i FILE`.
if(NOT CLANG_FORMAT)
  message(FATAL_ERROR "clang-format not found: packaging/setup.sh installs it (Debian package clang-format)")
endif()
file(GLOB_RECURSE FILES RELATIVE ${SOURCE_DIR}
  ${SOURCE_DIR}/core/*.h ${SOURCE_DIR}/core/*.cpp ${SOURCE_DIR}/gpu/*.h ${SOURCE_DIR}/gpu/*.cpp
  ${SOURCE_DIR}/ui/*.h ${SOURCE_DIR}/ui/*.cpp ${SOURCE_DIR}/app/*.h ${SOURCE_DIR}/app/*.cpp
  ${SOURCE_DIR}/tests/*.h ${SOURCE_DIR}/tests/*.cpp)
list(FILTER FILES EXCLUDE REGEX "^tests/fuzz/(corpus|regressions)/")
# one run over every file; each file that would change is named in a "FILE:LINE:COL: warning" line
execute_process(COMMAND ${CLANG_FORMAT} --dry-run ${FILES} WORKING_DIRECTORY ${SOURCE_DIR}
  ERROR_VARIABLE out RESULT_VARIABLE rc)
set(FAULTS "")
string(REGEX MATCHALL "[^\n]*:[0-9]+:[0-9]+: (warning|error):" hits "${out}")
foreach(h ${hits})
  string(REGEX REPLACE ":[0-9]+:[0-9]+: (warning|error):$" "" f "${h}")
  list(APPEND FAULTS ${f})
endforeach()
list(REMOVE_DUPLICATES FAULTS)
if(NOT rc EQUAL 0 AND NOT FAULTS)
  message(FATAL_ERROR "clang-format failed (${rc}):\n${out}")
endif()
list(LENGTH FILES checked)
if(FAULTS)
  list(JOIN FAULTS "\n  " text)
  message(FATAL_ERROR "not formatted as .clang-format says (clang-format -i FILE):\n  ${text}")
endif()
message(STATUS "${checked} files formatted as .clang-format says")
