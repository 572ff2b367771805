package wake

import (
	"testing"
	"time"
)

func pending(t *Threshold) bool {
	select {
	case <-t.C():
		return true
	default:
		return false
	}
}

func TestThreshold(t *testing.T) {
	base := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		sleep  time.Time // zero: not sleeping on a timer
		notify time.Time
		want   bool
	}{
		{"no wake-up published: every deadline signals", time.Time{}, base.Add(24 * time.Hour), true},
		{"earlier deadline signals", base, base.Add(-time.Second), true},
		{"the same time does not", base, base, false},
		{"a later deadline does not", base, base.Add(time.Minute), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := New()
			w.SleepUntil(tc.sleep)
			if got := w.Notify(tc.notify); got != tc.want {
				t.Fatalf("Notify = %v, want %v", got, tc.want)
			}
			if got := pending(w); got != tc.want {
				t.Fatalf("signal pending = %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("signals coalesce", func(t *testing.T) {
		w := New()
		for range 100 {
			w.Notify(base)
		}
		if !pending(w) || pending(w) {
			t.Fatal("100 notifications should leave exactly one signal")
		}
	})
}
