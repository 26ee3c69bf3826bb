// The chain in C++: a namespace, a class, a template, so that frames carry
// mangled names. Built -O2 -fomit-frame-pointer by the unwind tests.
extern "C" {
#include "capture.h"
}

namespace forensic_test {

struct Chain {
	FX_OPAQUE static int d(int x)
	{
		FX_CAPTURE(&fx_captured);
		fx_dump(&fx_captured);
		return x + 1;
	}
	FX_OPAQUE int c(int x) const { return d(x ^ bias) * 5; }
	int bias;
};

template <int N> FX_OPAQUE int step(const Chain &ch, int x) { return ch.c(x + N) - 11; }

FX_OPAQUE int a(int x)
{
	Chain ch{3};
	return step<7>(ch, x * 2) ^ 13;
}

} // namespace forensic_test

int main(int argc, char **)
{
	return forensic_test::a(argc) == 12345 ? 1 : 0;
}
