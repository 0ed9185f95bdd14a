/* Implements: a stand-in for an OpenBLAS whose CPU table does not know this
 * CPU (LD_PRELOAD it). Unless OPENBLAS_CORETYPE forces a kernel, the library
 * reports the generic Prescott kernel, as Debian 12's OpenBLAS 0.3.21 does on
 * Sapphire/Emerald Rapids. With the variable set it reports the real kernel.
 * Used by tests/cli/test_blas_kernel.sh. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>

char* openblas_get_corename(void) {
  const char* forced = getenv("OPENBLAS_CORETYPE");
  if (forced && *forced) {
    char* (*real)(void) = (char* (*)(void))dlsym(RTLD_NEXT, "openblas_get_corename");
    return real ? real() : (char*)"?";
  }
  return (char*)"Prescott";
}
