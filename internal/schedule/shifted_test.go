package schedule

import (
	"testing"
	"time"
)

// TestShifted: Now is ahead by the offset; timers still run in real time.
func TestShifted(t *testing.T) {
	c := Shifted(192 * time.Hour)
	d := time.Until(c.Now())
	if d < 192*time.Hour-time.Minute || d > 192*time.Hour+time.Minute {
		t.Fatalf("Now is %v ahead, want 192h", d)
	}
	if u := c.Until(c.Now().Add(time.Hour)); u > time.Hour || u < time.Hour-time.Minute {
		t.Fatalf("Until(now+1h) = %v", u)
	}
	start := time.Now()
	<-c.After(10 * time.Millisecond)
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("a 10 ms timer took %v: timers must not be shifted", el)
	}
}
