package bytesize

import (
	"math"
	"testing"
)

// TestSignedAndPerSecond: growth keeps its sign and rates say "/s", in the
// units Format uses.
func TestSignedAndPerSecond(t *testing.T) {
	for _, tc := range []struct {
		name, got, want string
	}{
		{"growth", Signed(1536), "+1.5 KiB"},
		{"shrink", Signed(-3 << 20), "-3.0 MiB"},
		{"no change", Signed(0), "+0 B"},
		{"smallest int64", Signed(math.MinInt64), "-8192.0 PiB"},
		{"rate", PerSecond(2048), "2.0 KiB/s"},
		{"small rate", PerSecond(512.7), "512 B/s"},
		{"below a byte", PerSecond(0.4), "0 B/s"},
		{"NaN", PerSecond(math.NaN()), "0 B/s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("got %q, want %q", tc.got, tc.want)
			}
		})
	}
}
