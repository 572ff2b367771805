package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestDaemonURL: the CLI reads a recorded address as an http origin, an
// address on every interface as loopback, and refuses one on another host.
func TestDaemonURL(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:9090", "http://127.0.0.1:9090"},
		{"0.0.0.0:9091", "http://127.0.0.1:9091"},
		{"[::]:9092", "http://[::1]:9092"},
		{":9093", "http://127.0.0.1:9093"},
		{"[::1]:9094", "http://[::1]:9094"},
		{"10.0.0.5:8080", ""},
		{"no port", ""},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteAddress(dir, tc.addr); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(filepath.Join(dir, AddressFileName))
			if err != nil || fi.Mode().Perm() != 0o600 {
				t.Fatalf("address file: %v, mode %v; want 0600", err, fi.Mode())
			}
			got, err := DaemonURL(dir)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("DaemonURL = %q, want a refusal", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("DaemonURL = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestRemoveAddress: a stop removes its own address and leaves another's.
func TestRemoveAddress(t *testing.T) {
	dir := t.TempDir()
	if _, err := DaemonURL(dir); !errors.Is(err, ErrNoAddress) {
		t.Fatalf("no file: %v, want ErrNoAddress", err)
	}
	if err := WriteAddress(dir, "127.0.0.1:9000"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveAddress(dir, "127.0.0.1:9001"); err != nil {
		t.Fatal(err)
	}
	if _, err := DaemonURL(dir); err != nil {
		t.Fatalf("another address removed the file: %v", err)
	}
	if err := RemoveAddress(dir, "127.0.0.1:9000"); err != nil {
		t.Fatal(err)
	}
	if _, err := DaemonURL(dir); !errors.Is(err, ErrNoAddress) {
		t.Fatalf("after removal: %v, want ErrNoAddress", err)
	}
}
