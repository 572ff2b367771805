package daemon

import "testing"

// One vCPU gets a second P (the writer's fsync must not stall every other
// goroutine); more CPUs, or an operator's GOMAXPROCS, are left alone.
func TestProcsFor(t *testing.T) {
	for _, c := range []struct {
		current int
		env     string
		want    int
	}{
		{1, "", minProcs},
		{2, "", 2},
		{8, "", 8},
		{1, "1", 1},
		{4, "4", 4},
	} {
		if got := procsFor(c.current, c.env); got != c.want {
			t.Errorf("procsFor(%d, %q) = %d, want %d", c.current, c.env, got, c.want)
		}
	}
}
