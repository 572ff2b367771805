package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Tmpfs mounts a tmpfs of sizeMiB mebibytes under a fresh directory and
// returns its path; the unmount is registered as a cleanup first, so it
// runs after the cleanups the caller registers later (a daemon's stop).
// The disk-full tests put a data directory on it (docs/operations.md,
// "Quotas"). Where mounting is impossible (not root, no mount permission)
// the test is skipped, except under CI=true, where it fails.
func Tmpfs(t testing.TB, sizeMiB int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "disk")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0700", sizeMiB), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("cannot mount a tmpfs (%v): %s", err, strings.TrimSpace(string(out)))
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: a test that cannot run fails the run)", msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// FillDisk writes the file at path until its file system is full
// (ENOSPC), in 1 MiB then 4 KiB pieces, and returns the bytes written.
// Any other write error fails the test.
func FillDisk(t testing.TB, path string) int64 {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, size := range []int{1 << 20, 4 << 10} {
		buf := make([]byte, size)
		for {
			w, err := f.Write(buf)
			n += int64(w)
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	return n
}
