# cli_smoke: the qkvfuse CLI's commands run, exit as documented and print
# well-formed JSON Lines. Run as: cmake -DQKVFUSE_CLI=<path> -P cli_smoke.cmake

if(NOT QKVFUSE_CLI)
  message(FATAL_ERROR "set QKVFUSE_CLI to the qkvfuse executable")
endif()

# Run the CLI with ARGN; check its exit code; return its stdout in out_var.
function(run_cli expect_rc out_var)
  execute_process(COMMAND ${QKVFUSE_CLI} ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL expect_rc)
    message(FATAL_ERROR "qkvfuse ${ARGN}: exit ${rc}, expected ${expect_rc}\nstdout:\n${out}\nstderr:\n${err}")
  endif()
  set(${out_var} "${out}" PARENT_SCOPE)
  set(${out_var}_err "${err}" PARENT_SCOPE)
endfunction()

# Every line of text must be a JSON object with the fields; the fields named in
# positive must be numbers > 0.
function(check_json_lines what text fields positive)
  string(REPLACE ";" "," text "${text}") # keep CMake's list splitting to lines
  string(REPLACE "\n" ";" lines "${text}")
  set(count 0)
  foreach(line IN LISTS lines)
    if(line STREQUAL "")
      continue()
    endif()
    string(JSON type ERROR_VARIABLE err TYPE "${line}")
    if(err OR NOT type STREQUAL "OBJECT")
      message(FATAL_ERROR "${what}: not a JSON object: ${line}\n${err}")
    endif()
    foreach(field IN LISTS fields)
      string(JSON value ERROR_VARIABLE err GET "${line}" ${field})
      if(err)
        message(FATAL_ERROR "${what}: field '${field}' missing in: ${line}")
      endif()
    endforeach()
    foreach(field IN LISTS positive)
      string(JSON ftype ERROR_VARIABLE err TYPE "${line}" ${field})
      string(JSON value ERROR_VARIABLE err GET "${line}" ${field})
      if(NOT ftype STREQUAL "NUMBER" OR NOT value GREATER 0)
        message(FATAL_ERROR "${what}: field '${field}' = ${value} (${ftype}) is not a positive number in: ${line}")
      endif()
    endforeach()
    math(EXPR count "${count} + 1")
  endforeach()
  if(count EQUAL 0)
    message(FATAL_ERROR "${what}: no JSON lines")
  endif()
  message(STATUS "${what}: ${count} JSON lines ok")
endfunction()

run_cli(0 out --help)
if(NOT out MATCHES "usage: qkvfuse")
  message(FATAL_ERROR "qkvfuse --help: no usage text")
endif()
run_cli(0 out demo --help)
run_cli(0 out bench --help)
run_cli(0 out version)
run_cli(2 out demo --no-such-option)
run_cli(2 out bench --tokens 0)
run_cli(2 out)

run_cli(0 out demo)
message(STATUS "qkvfuse demo: exit 0")

run_cli(0 out demo --json)
check_json_lines("qkvfuse demo --json" "${out}" "op;preset;device;tokens;dtype;ok;backend;max_err" "tokens")
if(out MATCHES "\"ok\": false")
  message(FATAL_ERROR "qkvfuse demo --json: a row is not ok:\n${out}")
endif()

# --device cpu runs there whatever the build (auto may pick a GPU); --device
# cuda depends on the machine, so only an unknown device is checked here.
run_cli(2 out demo --device nope)
run_cli(0 out demo --device cpu --tokens 8 --json)
check_json_lines("qkvfuse demo --device cpu --json" "${out}" "op;device;ok" "")
if(out MATCHES "\"device\": \"cuda\"" OR NOT out MATCHES "\"device\": \"cpu\"")
  message(FATAL_ERROR "qkvfuse demo --device cpu: a row names another device:\n${out}")
endif()

# --rotate-mb 8: a small rotation keeps the set-up (page faults) short
run_cli(0 out bench --tokens 1,64 --min-time 0.01 --json --rotate-mb 8)
check_json_lines("qkvfuse bench --json" "${out}"
  "op;preset;device;tokens;dtype;us;gbps;copy_gbps;pct_of_copy;unfused_us;speedup_vs_unfused;threads;backend"
  "tokens;us;gbps;copy_gbps;pct_of_copy;unfused_us;speedup_vs_unfused;threads")

# --json-out: the table on stdout and, from the same run, the JSON lines in the file
set(json_file "${CMAKE_CURRENT_BINARY_DIR}/cli_smoke_bench.jsonl")
file(REMOVE "${json_file}")
run_cli(0 out bench --preset phi-3-mini --op split --tokens 1 --min-time 0.01 --rotate-mb 8 --json-out "${json_file}")
if(NOT out MATCHES "split +phi-3-mini +1 ")
  message(FATAL_ERROR "qkvfuse bench --json-out: no table row on stdout:\n${out}")
endif()
file(READ "${json_file}" jout)
check_json_lines("qkvfuse bench --json-out" "${jout}" "op;preset;tokens;us;pct_of_copy" "tokens;us;pct_of_copy")
string(REGEX MATCHALL "\n" jlines "${jout}")
list(LENGTH jlines njson)
if(NOT njson EQUAL 1)
  message(FATAL_ERROR "qkvfuse bench --json-out: ${njson} lines, expected 1:\n${jout}")
endif()
file(REMOVE "${json_file}")
run_cli(1 out bench --preset phi-3-mini --op split --tokens 1 --json-out "${CMAKE_CURRENT_BINARY_DIR}/no/such/dir/x.jsonl")
run_cli(2 out bench --json-out)
if(EXISTS /dev/full) # every write fails (ENOSPC): exit 1, not a silent empty file
  run_cli(1 out bench --preset phi-3-mini --op split --tokens 1 --min-time 0.01 --rotate-mb 8 --json-out /dev/full)
  if(NOT out_err MATCHES "--json-out: cannot write /dev/full: [^\n]")
    message(FATAL_ERROR "qkvfuse bench --json-out /dev/full: no message naming the file and the failure:\n${out_err}")
  endif()
endif()
