package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/proctest"
)

// readmeMarker precedes each README code block TestReadmeFirstSession runs.
const readmeMarker = "<!-- readme-test: first-session -->"

// readmeRunTimeout bounds the whole block: three heartbeats 5 s apart,
// the smoke list, and serve's start and stop.
const readmeRunTimeout = 3 * time.Minute

// TestReadmeFirstSession runs the README's offline "A first session"
// block, as written, with sh -e in a fresh directory holding the built
// binary as ./chalupa. The one change is the port: serve gets a free one
// through CHALUPA_LISTEN (so the test runs beside others), and the literal
// 127.0.0.1:8080 in the block is replaced by it; every other command finds
// the daemon through the address serve records (docs/operations.md,
// "Embedded default").
func TestReadmeFirstSession(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(proctest.RepoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	script := readmeBlock(t, string(raw))
	bin := proctest.BuildBinary(t)
	dir := t.TempDir()
	if err := os.Link(bin, filepath.Join(dir, "chalupa")); err != nil {
		b, rerr := os.ReadFile(bin)
		if rerr != nil || os.WriteFile(filepath.Join(dir, "chalupa"), b, 0o755) != nil {
			t.Fatal(err)
		}
	}
	addr := proctest.FreeAddr(t)
	script = strings.ReplaceAll(script, "127.0.0.1:8080", addr)
	ctx, cancel := context.WithTimeout(context.Background(), readmeRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CHALUPA_LISTEN=" + addr, "CHALUPA_MIN_FREE_BYTES=0"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
		t.Fatalf("the README's first session failed: %v\n%s\n--- serve.log:\n%s", err, out, log)
	}
	for _, want := range []string{"demo-harbor", "KEYS ACTIVE/ROTATING/REVOKED", "adminListFleet", "CHECK", "gpu-1", "reaper"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in the output:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), " FAIL ") {
		t.Errorf("a smoke row failed:\n%s", out)
	}
}

// readmeBlock is the code of the ```sh blocks that follow readmeMarker,
// joined; the test fails when there is none.
func readmeBlock(t *testing.T, readme string) string {
	t.Helper()
	var b strings.Builder
	for rest := readme; ; {
		i := strings.Index(rest, readmeMarker)
		if i < 0 {
			break
		}
		rest = rest[i+len(readmeMarker):]
		open := strings.Index(rest, "```sh\n")
		if open < 0 {
			t.Fatal("a readme-test marker without a ```sh block after it")
		}
		rest = rest[open+len("```sh\n"):]
		end := strings.Index(rest, "\n```")
		if end < 0 {
			t.Fatal("an unterminated ```sh block")
		}
		b.WriteString(rest[:end+1])
	}
	if b.Len() == 0 {
		t.Fatalf("README.md has no %s block", readmeMarker)
	}
	return b.String()
}
