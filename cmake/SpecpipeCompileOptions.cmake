# Compile options shared by every specpipe target: specpipe_target_defaults(<target>).

# Floating point: no fast-math, and no implicit FMA contraction. Batch invariance
# (ARCHITECTURE.md section 7) needs one expression to round the same way wherever
# the compiler inlines it; the kernels ask for FMA explicitly where they want it.
set(SPECPIPE_FP_FLAGS -ffp-contract=off -fno-fast-math)

set(SPECPIPE_WARNING_FLAGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor
    -Wcast-align -Wunused -Woverloaded-virtual -Wnull-dereference -Wformat=2
    -Wimplicit-fallthrough)

set(SPECPIPE_SANITIZER_FLAGS "")
if(SPECPIPE_SANITIZE)
  # GCC 12's -Wmaybe-uninitialized reports false positives in libstdc++ (std::function
  # inside <regex>, used by CAF's test runner) once sanitizers change the inlining.
  set(SPECPIPE_SANITIZER_FLAGS -fsanitize=${SPECPIPE_SANITIZE} -fno-omit-frame-pointer
      -fno-sanitize-recover=all -Wno-maybe-uninitialized)
  add_link_options(-fsanitize=${SPECPIPE_SANITIZE})
endif()

function(specpipe_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX,C>:-march=${SPECPIPE_CPU_ARCH} ${SPECPIPE_FP_FLAGS}
                                ${SPECPIPE_WARNING_FLAGS} ${SPECPIPE_SANITIZER_FLAGS}>
    $<$<AND:$<COMPILE_LANGUAGE:CXX,C>,$<BOOL:${SPECPIPE_WERROR}>>:-Werror>)
endfunction()
