package main

import "testing"

// TestParseInitTrace: the clock and bytes of the packages under the prefix
// are summed; other lines and packages are left out.
func TestParseInitTrace(t *testing.T) {
	const text = `init internal/bytealg @0.006 ms, 0.010 ms clock, 0 bytes, 0 allocs
init github.com/chalupa-run/chalupa/console @22 ms, 0.004 ms clock, 424 bytes, 4 allocs
chalupa dev (commit unknown)
init github.com/chalupa-run/chalupa/storage @22 ms, 0.21 ms clock, 211888 bytes, 273 allocs
`
	for _, c := range []struct {
		name, prefix string
		ms           float64
		bytes        int64
		n            int
	}{
		{"own", module, 0.214, 212312, 2},
		{"all", "", 0.224, 212312, 3},
		{"none", "example.com/", 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ms, bytes, n, err := parseInitTrace(text, c.prefix)
			if err != nil || n != c.n || bytes != c.bytes || ms < c.ms-1e-9 || ms > c.ms+1e-9 {
				t.Errorf("parseInitTrace = %v ms, %d bytes, %d lines, %v; want %v, %d, %d", ms, bytes, n, err, c.ms, c.bytes, c.n)
			}
		})
	}
	if _, _, _, err := parseInitTrace("init x @1 ms, y ms clock, 0 bytes, 0 allocs\n", ""); err == nil {
		t.Error("a malformed line parsed")
	}
}
