package proctest

import "testing"

func TestFreePortBelowEphemeral(t *testing.T) {
	low := ephemeralLow()
	for range 50 {
		if p := FreePort(t); p < freePortFloor || p >= low {
			t.Fatalf("port %d outside [%d, %d)", p, freePortFloor, low)
		}
	}
}
