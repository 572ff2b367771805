package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadToken: `org token set` takes the token from stdin or a file
// (trailing newline dropped), refuses empty and oversized input, and no
// error repeats what it read.
func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("dop_v1_fromfile\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("SECRETX", maxTokenInput)
	for _, tc := range []struct {
		name, path, stdin, want string
		fail                    bool
	}{
		{name: "stdin", stdin: "dop_v1_fromstdin\n", want: "dop_v1_fromstdin"},
		{name: "file over stdin", path: file, stdin: "ignored", want: "dop_v1_fromfile"},
		{name: "empty stdin", stdin: " \n", fail: true},
		{name: "too long", stdin: long, fail: true},
		{name: "missing file", path: filepath.Join(dir, "nope"), fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readToken(tc.path, strings.NewReader(tc.stdin))
			if tc.fail {
				if err == nil || strings.Contains(err.Error(), "SECRETX") {
					t.Fatalf("readToken = %q, %v; want an error without the input", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("readToken = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
