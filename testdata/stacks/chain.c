/* main -> a -> b -> c -> d in one executable; d captures its registers and
 * stack (capture.h). With the argument "thread" the chain runs in a second
 * thread: main -> pthread_create, and thread_main -> a -> b -> c -> d.
 * The unwind package's tests build it with several compilers and flags.
 * Each call's result is used after it returns, so none is a tail call. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "capture.h"

FX_OPAQUE int d(int x)
{
	FX_CAPTURE(&fx_captured);
	fx_dump(&fx_captured);
	return x + 1;
}

FX_OPAQUE int c(int x) { return d(x ^ 3) * 5; }
FX_OPAQUE int b(int x) { return c(x + 7) - 11; }
FX_OPAQUE int a(int x) { return b(x * 2) ^ 13; }

FX_OPAQUE static void *thread_main(void *arg)
{
	return (void *)(intptr_t)(a((int)(intptr_t)arg) + 1);
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "thread") == 0) {
		pthread_t t;
		void *res;
		if (pthread_create(&t, NULL, thread_main, (void *)(intptr_t)argc) != 0 ||
		    pthread_join(t, &res) != 0)
			return 2;
		return res == (void *)12345 ? 1 : 0;
	}
	return a(argc) == 12345 ? 1 : 0;
}
