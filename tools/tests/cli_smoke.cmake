# SPDX-License-Identifier: Apache-2.0
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

# A usage error: exit 2, and on stderr exactly two lines: "qkvfuse[ CMD]: ..."
# naming the bad option or value, then "see 'qkvfuse[ CMD] --help'"; never
# the help text itself. `bad` is a regex for the option or value.
function(check_usage_error cmd bad)
  run_cli(2 out ${ARGN})
  string(REGEX MATCHALL "\n" nl "${out_err}")
  list(LENGTH nl lines)
  if(cmd STREQUAL "")
    set(prefix "qkvfuse")
  else()
    set(prefix "qkvfuse ${cmd}")
  endif()
  if(NOT lines EQUAL 2 OR NOT out_err MATCHES "^${prefix}: [^\n]*${bad}[^\n]*\nsee '${prefix} --help'\n$"
     OR out_err MATCHES "usage:|options:")
    string(REPLACE ";" " " args "${ARGN}")
    message(FATAL_ERROR "qkvfuse ${args}: expected one line naming '${bad}' and the hint to '${prefix} --help'; "
                        "stderr:\n${out_err}")
  endif()
  set(out_err "${out_err}" PARENT_SCOPE)
endfunction()

run_cli(0 out --help)
if(NOT out MATCHES "usage: qkvfuse")
  message(FATAL_ERROR "qkvfuse --help: no usage text")
endif()
run_cli(0 out demo --help)
run_cli(0 out bench --help)
set(bench_help "${out}")
run_cli(0 out version)
check_usage_error(demo "--no-such-option" demo --no-such-option)
check_usage_error(bench "--no-such-option" bench --no-such-option)
check_usage_error(bench "--tokens[^\n]*: 0" bench --tokens 0)
check_usage_error(bench "--threads[^\n]*: 999" bench --threads 999)
check_usage_error(version "--x" version --x)
check_usage_error("" "a command is needed")
check_usage_error("" "frob" frob)
check_usage_error("" "nope" help nope)

# --op: the variants come from one table; the help lists them, the parser
# takes each of them, and an unknown one is answered with all of them.
string(REGEX MATCHALL "\n                      [a-z]+ " op_lines "${bench_help}")
set(variants "")
foreach(line IN LISTS op_lines)
  string(STRIP "${line}" name)
  list(APPEND variants "${name}")
endforeach()
list(LENGTH variants nvariants)
list(FIND variants inplace inplace_at)
if(nvariants LESS 4 OR inplace_at LESS 0)
  message(FATAL_ERROR "qkvfuse bench --help: the --op variants listed are '${variants}'")
endif()
check_usage_error(bench "--op: unknown variant[^\n]*: foo" bench --op foo)
set(op_err "${out_err}")
foreach(name IN LISTS variants)
  if(NOT op_err MATCHES "[ (]${name}[,)]")
    message(FATAL_ERROR "qkvfuse bench --op foo: the variant '${name}' of the help is not listed:\n${op_err}")
  endif()
  run_cli(0 out bench --op ${name} --preset phi-3-mini --tokens 1 --min-time 0.001 --rotate-mb 0.001 --json)
  check_json_lines("qkvfuse bench --op ${name}" "${out}" "op" "tokens")
endforeach()
check_usage_error(bench "--op: variant given twice: split" bench --op split,cache,split)

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

# --rotate-mb: each row reports the span it cycles through: whole sets of the
# per-call tensors, the fewest that reach the target (at least one), and the
# copy's buffers no less than the target; 0 is refused (it is no span).
function(check_rotation text target)
  string(REPLACE "\n" ";" lines "${text}")
  foreach(line IN LISTS lines)
    if(line STREQUAL "")
      continue()
    endif()
    foreach(field instances rotate_target_bytes set_bytes rotate_bytes copy_rotate_bytes)
      string(JSON ${field} GET "${line}" ${field})
    endforeach()
    math(EXPR span "${instances} * ${set_bytes}")
    math(EXPR below "(${instances} - 1) * ${set_bytes}")
    if(NOT rotate_target_bytes EQUAL target OR NOT rotate_bytes EQUAL span OR rotate_bytes LESS target
       OR NOT below LESS target OR copy_rotate_bytes LESS target)
      message(FATAL_ERROR "qkvfuse bench --rotate-mb: target ${target} B; the row reports instances ${instances} x "
                          "set ${set_bytes} B = ${rotate_bytes} B, target ${rotate_target_bytes} B, copy "
                          "${copy_rotate_bytes} B:\n${line}")
    endif()
  endforeach()
endfunction()
run_cli(0 out bench --preset phi-3-mini --op split,dequant --tokens 1,64 --min-time 0.001 --rotate-mb 3 --json)
check_rotation("${out}" 3000000)
run_cli(0 out bench --preset phi-3-mini --op cache --tokens 16 --min-time 0.001 --rotate-mb 0.001 --json)
check_rotation("${out}" 1000)
string(JSON instances GET "${out}" instances)
if(NOT instances EQUAL 1)
  message(FATAL_ERROR "qkvfuse bench --rotate-mb 0.001: ${instances} sets of tensors, expected 1:\n${out}")
endif()
check_usage_error(bench "--rotate-mb[^\n]*: 0" bench --rotate-mb 0)

# --json-out: the table on stdout and, from the same run, the JSON lines in the file
set(json_file "${CMAKE_CURRENT_BINARY_DIR}/cli_smoke_bench.jsonl")
file(REMOVE "${json_file}")
run_cli(0 out bench --preset phi-3-mini --op split --tokens 1 --min-time 0.01 --rotate-mb 8 --json-out "${json_file}")
if(NOT out MATCHES "split +phi-3-mini +1 ")
  message(FATAL_ERROR "qkvfuse bench --json-out: no table row on stdout:\n${out}")
endif()
file(READ "${json_file}" jout)
check_json_lines("qkvfuse bench --json-out" "${jout}" "op;preset;tokens;us;pct_of_copy" "tokens;us;pct_of_copy")
# the table's rot MB is the row's rotate_bytes (%.3f MB; rotate_bytes is a multiple of 64, never a tie)
string(JSON rotate_bytes GET "${jout}" rotate_bytes)
math(EXPR kb "(${rotate_bytes} + 500) / 1000")
math(EXPR mb_int "${kb} / 1000")
math(EXPR mb_frac "${kb} % 1000 + 1000")
string(SUBSTRING "${mb_frac}" 1 3 mb_frac)
if(NOT out MATCHES "\nsplit +phi-3-mini +1 +[^ ]+ +[^ ]+ +[0-9]+ +[0-9.]+ +${mb_int}\\.${mb_frac} ")
  message(FATAL_ERROR "qkvfuse bench: the table's rot MB is not ${mb_int}.${mb_frac} (rotate_bytes "
                      "${rotate_bytes}):\n${out}")
endif()
if(out MATCHES "rotating over")
  message(FATAL_ERROR "qkvfuse bench: the header claims a rotation span:\n${out}")
endif()
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

# A table in `text`: its header is the line that starts with the first of
# `headers`, its rows follow up to a blank line. Each column is aligned as
# `aligns` says (one l or r per header): in every row, a left-aligned cell
# starts where its header starts and a right-aligned one ends where its
# header ends, a blank or the line's edge beside it.
function(check_table what text headers aligns)
  string(REPLACE ";" "," text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  list(GET headers 0 first)
  set(state find)
  set(nrows 0)
  foreach(line IN LISTS lines)
    if(state STREQUAL "find")
      if(line MATCHES "^${first} ")
        set(state rows)
        set(header "${line}")
        # each header's first and one-past-last offsets, searched left to right
        set(starts "")
        set(ends "")
        set(pos 0)
        foreach(h IN LISTS headers)
          string(SUBSTRING "${line}" ${pos} -1 rest)
          string(FIND "${rest}" "${h}" at)
          if(at LESS 0)
            message(FATAL_ERROR "${what}: no header '${h}' in: ${line}")
          endif()
          string(LENGTH "${h}" hlen)
          math(EXPR start "${pos} + ${at}")
          math(EXPR pos "${start} + ${hlen}")
          list(APPEND starts ${start})
          list(APPEND ends ${pos})
        endforeach()
      endif()
      continue()
    endif()
    if(line STREQUAL "")
      break()
    endif()
    math(EXPR nrows "${nrows} + 1")
    string(LENGTH "${line}" len)
    set(col 0)
    foreach(h IN LISTS headers)
      list(GET starts ${col} start)
      list(GET ends ${col} end)
      string(SUBSTRING "${aligns}" ${col} 1 align)
      if(align STREQUAL "l")
        set(at ${start})
        math(EXPR beside "${start} - 1")
      else()
        math(EXPR at "${end} - 1")
        set(beside ${end})
      endif()
      set(cell_char " ")
      if(at LESS len)
        string(SUBSTRING "${line}" ${at} 1 cell_char)
      endif()
      set(beside_char " ")
      if(beside GREATER_EQUAL 0 AND beside LESS len)
        string(SUBSTRING "${line}" ${beside} 1 beside_char)
      endif()
      if(cell_char STREQUAL " " OR NOT beside_char STREQUAL " ")
        message(FATAL_ERROR "${what}: column '${h}' (aligned ${align}) is not in line with its header:\n"
                            "  ${header}\n  ${line}") # indented: CMake keeps the blanks
      endif()
      math(EXPR col "${col} + 1")
    endforeach()
  endforeach()
  if(nrows LESS 2)
    message(FATAL_ERROR "${what}: ${nrows} table rows in:\n${text}")
  endif()
  message(STATUS "${what}: ${nrows} table rows in line with the header")
endfunction()

# The bench table with a backend name longer than its header (the scalar ISA,
# forced), preset names and numbers of several widths, and the reference
# columns: every column stays in line.
execute_process(COMMAND ${CMAKE_COMMAND} -E env QKVFUSE_CPU_ISA=scalar
                        ${QKVFUSE_CLI} bench --backend cpu --op split,cache --tokens 1,64 --min-time 0.001
                        --rotate-mb 0.001 --reference
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "\nsplit +gemma-3-12b +64 +bfloat16 +cpu-scalar ")
  message(FATAL_ERROR "qkvfuse bench (scalar ISA): exit ${rc}, or no cpu-scalar row of gemma-3-12b:\n${out}\n${err}")
endif()
check_table("qkvfuse bench table" "${out}"
  "op;preset;tokens;dtype;backend;thr;MB;rot MB;fused us;GB/s;copy;%copy;unfused us;speedup;ref us;vs ref"
  "llrllrrrrrrrrrrr")
execute_process(COMMAND ${CMAKE_COMMAND} -E env QKVFUSE_CPU_ISA=scalar ${QKVFUSE_CLI} demo --device cpu --tokens 8
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES " cpu-scalar ")
  message(FATAL_ERROR "qkvfuse demo (scalar ISA): exit ${rc}, or no cpu-scalar row:\n${out}\n${err}")
endif()
check_table("qkvfuse demo table" "${out}" "op;preset;device;tokens;dtype;backend;norm;cache;max err;result"
  "lllrllllrl")
