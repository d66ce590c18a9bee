# gl-emu targets (test-only; EXCLUDE_FROM_ALL, built on demand by emu/build.mjs): the CUDA sources of src/cuda
# rewritten by emu/rewrite.mjs and compiled with g++ against emu/include, linked with gl_core (the CPU
# reference) and tools/gpu_driver.cpp.
#   gpu_driver_emu_bf16    bf16 stored as the GPU stores it (round to nearest even)
#   gpu_driver_emu_exact   bf16 storage replaced by fp32 (differences from the CPU engine are maths only)
#   gpu_driver_emu_asan    bf16, AddressSanitizer
#   gl_emu_selftest        the emulator's own checks catch what they claim to
#   gpu_driver_mutant_<n>  exact build with one planted bug from emu/mutants.json (emu/mutants.mjs runs them)
set(GL_NODE "" CACHE FILEPATH "node, for the gl-emu rewrite")
if(NOT GL_NODE)
  find_program(GL_NODE_FOUND node)
  set(GL_NODE ${GL_NODE_FOUND})
endif()
set(GL_EMU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/emu)
set(GL_EMU_GEN ${CMAKE_CURRENT_BINARY_DIR}/emu-gen)
set(GL_EMU_CU kernels attention cuda_engine)

# gen/<tag>/<file>.cpp from <dir>/<file>.cu (optionally with a mutant applied)
function(gl_emu_rewrite tag dir file mutant)
  set(in ${dir}/${file}.cu)
  set(out ${GL_EMU_GEN}/${tag}/${file}.cpp)
  if(mutant)
    set(extra --mutant ${mutant})
  endif()
  add_custom_command(OUTPUT ${out}
    COMMAND ${GL_NODE} ${GL_EMU_DIR}/rewrite.mjs ${in} ${out} ${extra}
    DEPENDS ${in} ${GL_EMU_DIR}/rewrite.mjs ${GL_EMU_DIR}/mutants.json
    COMMENT "gl-emu rewrite ${file}.cu (${tag})" VERBATIM)
endfunction()

function(gl_emu_objects target sources defs opts)
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${sources})
  target_include_directories(${target} BEFORE PRIVATE ${GL_EMU_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src/cuda)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include)
  target_compile_definitions(${target} PRIVATE ${defs})
  # CUDA source compiled as C++: #pragma unroll and unsigned threadIdx comparisons are expected there
  target_compile_options(${target} PRIVATE -Wno-unknown-pragmas -Wno-sign-compare ${opts})
endfunction()

set(GL_CU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/src/cuda)
foreach(f ${GL_EMU_CU})
  gl_emu_rewrite(plain ${GL_CU_DIR} ${f} "")
endforeach()

# The driver does not depend on the precision: compiled once.
gl_emu_objects(gl_emu_driver ${CMAKE_CURRENT_SOURCE_DIR}/tools/gpu_driver.cpp "GL_CUDA_EMU=1" "")
target_include_directories(gl_emu_driver PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/cuda)

set(GL_EMU_ASAN_FLAGS -fsanitize=address -fno-omit-frame-pointer -O1)
foreach(v bf16 exact asan)
  set(defs "")
  set(opts "")
  if(v STREQUAL "exact")
    set(defs GL_EMU_EXACT=1)
  elseif(v STREQUAL "asan")
    set(opts ${GL_EMU_ASAN_FLAGS})
  endif()
  gl_emu_objects(gl_emu_runtime_${v} ${GL_EMU_DIR}/runtime.cpp "${defs}" "${opts}")
  foreach(f ${GL_EMU_CU})
    gl_emu_objects(gl_emu_${f}_${v} ${GL_EMU_GEN}/plain/${f}.cpp "${defs}" "${opts}")
  endforeach()
  add_executable(gpu_driver_emu_${v} EXCLUDE_FROM_ALL
    $<TARGET_OBJECTS:gl_emu_driver> $<TARGET_OBJECTS:gl_emu_runtime_${v}>
    $<TARGET_OBJECTS:gl_emu_kernels_${v}> $<TARGET_OBJECTS:gl_emu_attention_${v}> $<TARGET_OBJECTS:gl_emu_cuda_engine_${v}>)
  target_link_libraries(gpu_driver_emu_${v} PRIVATE gl_core)
  if(v STREQUAL "asan")
    target_link_options(gpu_driver_emu_${v} PRIVATE -fsanitize=address)
  endif()
endforeach()

# The emulator's own checks (launch limits, divergence, deadlock, canaries, cuBLAS rules, bf16 rounding).
gl_emu_rewrite(selftest ${GL_EMU_DIR} selftest "")
add_executable(gl_emu_selftest EXCLUDE_FROM_ALL ${GL_EMU_GEN}/selftest/selftest.cpp $<TARGET_OBJECTS:gl_emu_runtime_bf16>)
target_include_directories(gl_emu_selftest BEFORE PRIVATE ${GL_EMU_DIR}/include)
target_link_libraries(gl_emu_selftest PRIVATE Threads::Threads)

# Mutants: the mutated file recompiled, the rest shared with the exact build.
if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.19)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${GL_EMU_DIR}/mutants.json)
  file(READ ${GL_EMU_DIR}/mutants.json GL_MUTANTS)
  string(JSON n LENGTH ${GL_MUTANTS})
  set(GL_EMU_MUTANT_TARGETS "")
  if(n GREATER 0)
    math(EXPR last "${n} - 1")
    foreach(i RANGE ${last})
      string(JSON name GET ${GL_MUTANTS} ${i} name)
      string(JSON file GET ${GL_MUTANTS} ${i} file)
      string(REGEX REPLACE "\\.cu$" "" base ${file})
      gl_emu_rewrite(mutant-${name} ${GL_CU_DIR} ${base} ${name})
      gl_emu_objects(gl_emu_mutant_${name} ${GL_EMU_GEN}/mutant-${name}/${base}.cpp GL_EMU_EXACT=1 "")
      set(objs $<TARGET_OBJECTS:gl_emu_driver> $<TARGET_OBJECTS:gl_emu_runtime_exact> $<TARGET_OBJECTS:gl_emu_mutant_${name}>)
      foreach(f ${GL_EMU_CU})
        if(NOT f STREQUAL base)
          list(APPEND objs $<TARGET_OBJECTS:gl_emu_${f}_exact>)
        endif()
      endforeach()
      add_executable(gpu_driver_mutant_${name} EXCLUDE_FROM_ALL ${objs})
      target_link_libraries(gpu_driver_mutant_${name} PRIVATE gl_core)
      list(APPEND GL_EMU_MUTANT_TARGETS gpu_driver_mutant_${name})
    endforeach()
  endif()
  add_custom_target(gl_emu_mutants DEPENDS ${GL_EMU_MUTANT_TARGETS})
endif()
add_custom_target(gl_emu DEPENDS gpu_driver_emu_bf16 gpu_driver_emu_exact gpu_driver_emu_asan gl_emu_selftest)
