package testwait_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/internal/testwait"
)

// recorder stands in for the test handed to Eventually and keeps its
// failure instead of ending the test.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
}

// TestEventually: a condition that comes true ends the wait without a
// failure after as many asks as it took; one that never does fails with
// the bound, what was awaited and the condition's last state.
func TestEventually(t *testing.T) {
	t.Run("comes true", func(t *testing.T) {
		r := &recorder{TB: t}
		asks := 0
		testwait.Eventually(r, testwait.Short, "the third ask", func() (bool, string) {
			asks++
			return asks == 3, fmt.Sprint(asks)
		})
		if r.failure != "" || asks != 3 {
			t.Fatalf("failure %q after %d asks, want none after 3", r.failure, asks)
		}
	})
	t.Run("never comes true", func(t *testing.T) {
		r := &recorder{TB: t}
		asks := 0
		start := time.Now()
		testwait.Eventually(r, testwait.Bound(50*time.Millisecond), "the impossible", func() (bool, string) {
			asks++
			return false, fmt.Sprintf("ask %d", asks)
		})
		want := fmt.Sprintf("timed out after 50ms waiting for the impossible; last state: ask %d", asks)
		if r.failure != want {
			t.Fatalf("failure %q, want %q", r.failure, want)
		}
		if waited := time.Since(start); waited < 50*time.Millisecond || asks < 2 {
			t.Fatalf("gave up after %s and %d asks, want the whole bound and more than one ask", waited, asks)
		}
	})
}
