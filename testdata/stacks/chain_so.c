/* main -> a in the executable, then b -> c -> d in libchain.so. */
int b(int x);

__attribute__((noipa)) int a(int x) { return b(x * 2) ^ 13; }

int main(int argc, char **argv)
{
	(void)argv;
	return a(argc) == 12345 ? 1 : 0;
}
