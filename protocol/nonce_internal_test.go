package protocol

import (
	"strings"
	"testing"
	"time"
)

// TestNoncesSortByTime: nonces made later sort after earlier ones byte by
// byte (SQLite's BINARY order), whatever their random part, and each is a
// valid, 36-character nonce.
func TestNoncesSortByTime(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	prev := ""
	for i := range 2000 {
		n := newNonceAt(t0.Add(time.Duration(i) * time.Millisecond))
		if !ValidNonce(n) || len(n) != 36 {
			t.Fatalf("nonce %q: not a valid 36-character nonce", n)
		}
		if n <= prev {
			t.Fatalf("nonce %q made after %q sorts before it", n, prev)
		}
		prev = n
	}
	if n := newNonceAt(t0); !strings.HasPrefix(n, "01a230d51280") {
		t.Errorf("nonce at %v = %q, want the unix milliseconds in hex first", t0, n)
	}
}
