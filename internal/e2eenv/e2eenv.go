// Package e2eenv decides what a test does when its environment is missing:
// skip on a developer machine, fail where end-to-end tests are required
// (make test and CI set FORENSIC_REQUIRE_E2E=1), so a skipped BPF test can
// never pass silently under CI.
package e2eenv

import (
	"os"
	"testing"
)

// Required reports whether end-to-end tests must run here.
func Required() bool {
	return os.Getenv("FORENSIC_REQUIRE_E2E") == "1" || os.Getenv("CI") != ""
}

// Need skips t (or fails it, when Required) unless ok; why says what is
// missing and how to provide it.
func Need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if Required() {
		t.Fatalf("end-to-end prerequisite missing (required under FORENSIC_REQUIRE_E2E/CI): %s", why)
	}
	t.Skipf("skipping: %s", why)
}

// NeedRoot needs euid 0 (loading BPF programs).
func NeedRoot(t testing.TB) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "needs root to load BPF programs")
}
