/// \file
/// Compiles a file of vector code once per instruction set: with `DTRAIN_ISA_FILE` naming it (a quoted
/// path), this header includes it for the baseline and, where the compiler targets them, for AVX2 and
/// AVX-512, each time with `DTRAIN_ISA` naming the set's namespace and `DTRAIN_ISA_TARGET` its target
/// attribute (backend/cpu/isa.hpp), then undefines `DTRAIN_ISA_FILE`. On its own it defines nothing. No
/// include guard, by design.
#include "dtrain/backend/cpu/isa.hpp"

#if defined(DTRAIN_ISA_FILE)
#define DTRAIN_ISA baseline
#define DTRAIN_ISA_TARGET
#include DTRAIN_ISA_FILE
#undef DTRAIN_ISA
#undef DTRAIN_ISA_TARGET
#if DTRAIN_CPU_AVX
#define DTRAIN_ISA avx2
#define DTRAIN_ISA_TARGET DTRAIN_AVX2
#include DTRAIN_ISA_FILE
#undef DTRAIN_ISA
#undef DTRAIN_ISA_TARGET
#define DTRAIN_ISA avx512
#define DTRAIN_ISA_TARGET DTRAIN_AVX512
#include DTRAIN_ISA_FILE
#undef DTRAIN_ISA
#undef DTRAIN_ISA_TARGET
#endif
#undef DTRAIN_ISA_FILE
#endif
