/* b -> c -> d in a shared library called from chain_so.c's a; d captures
 * its registers and stack. */
#include "capture.h"

FX_OPAQUE int d(int x)
{
	FX_CAPTURE(&fx_captured);
	fx_dump(&fx_captured);
	return x + 1;
}

FX_OPAQUE int c(int x) { return d(x ^ 3) * 5; }
FX_OPAQUE int b(int x) { return c(x + 7) - 11; }
