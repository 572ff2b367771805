package daemon

import "testing"

// Arbitrary client methods must not become label values (unbounded series).
func TestKnownMethod(t *testing.T) {
	for in, want := range map[string]string{"GET": "GET", "POST": "POST", "M00001XXXX": "other", "get": "other", "": "other"} {
		if got := knownMethod(in); got != want {
			t.Errorf("knownMethod(%q) = %q, want %q", in, got, want)
		}
	}
}
