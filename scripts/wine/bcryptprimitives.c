/* ProcessPrng for Wine < 8.13, which lacks it: every Rust >= 1.78 Windows binary
 * imports bcryptprimitives.dll!ProcessPrng. Forwarded to advapi32!SystemFunction036
 * (RtlGenRandom), in chunks because that takes a 32-bit length. Built and installed
 * into a test prefix by scripts/wine/setup-prefix.sh; never shipped. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) return FALSE;
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
