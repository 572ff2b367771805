package cost_test

import (
	"math"
	"testing"
	"time"

	"github.com/chalupa-run/chalupa/reaper/cost"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestCharge checks the billing rule against hand-computed values
// (docs/operations.md, "Cost reconciliation"): per second, at least 60 s or
// $0.01 per droplet, capped per calendar month at the monthly price.
func TestCharge(t *testing.T) {
	jan, feb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	mar := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	at := func(day, h, m, s int) time.Time { return time.Date(2026, 1, day, h, m, s, 0, time.UTC) }
	const basic, basicMonth = 0.00893, 6.0 // s-1vcpu-1gb
	const gpu, gpuMonth = 3.39, 2522.16    // gpu-h100x1-80gb
	never := time.Time{}
	for _, tc := range []struct {
		name                 string
		hourly, monthly      float64
		start, end, now      time.Time
		monthStart, monthEnd time.Time
		want                 float64
	}{
		{"two hours of a basic droplet: 2 x 0.00893", basic, basicMonth, at(5, 10, 0, 0), at(5, 12, 0, 0), at(9, 0, 0, 0), jan, feb, 0.01786},
		{"30 s is billed as the $0.01 minimum", basic, basicMonth, at(5, 10, 0, 0), at(5, 10, 0, 30), at(9, 0, 0, 0), jan, feb, 0.01},
		{"10 s of a GPU is billed as 60 s: 3.39/60", gpu, gpuMonth, at(5, 10, 0, 0), at(5, 10, 0, 10), at(9, 0, 0, 0), jan, feb, 3.39 / 60},
		{"90.5 s rounds up to 91 s: 3.39 x 91/3600", gpu, gpuMonth, at(5, 10, 0, 0), at(5, 10, 1, 30).Add(500 * time.Millisecond), at(9, 0, 0, 0), jan, feb, 3.39 * 91 / 3600},
		{"still running: counted to now, 3 h", gpu, gpuMonth, at(5, 10, 0, 0), never, at(5, 13, 0, 0), jan, feb, 3 * 3.39},
		{"700 h of a $6 droplet is capped at $6", basic, basicMonth, at(1, 0, 0, 0), at(1, 0, 0, 0).Add(700 * time.Hour), at(31, 23, 0, 0), jan, feb, 6},
		{"no monthly price: capped at 672 h", basic, 0, at(1, 0, 0, 0), never, at(31, 0, 0, 0), jan, feb, 672 * basic},
		{"month boundary, January part: 1 h", gpu, gpuMonth, at(31, 23, 0, 0), time.Date(2026, 2, 1, 2, 0, 0, 0, time.UTC), time.Date(2026, 2, 2, 0, 0, 0, 0, time.UTC), jan, feb, 3.39},
		{"month boundary, February part: 2 h", gpu, gpuMonth, at(31, 23, 0, 0), time.Date(2026, 2, 1, 2, 0, 0, 0, time.UTC), time.Date(2026, 2, 2, 0, 0, 0, 0, time.UTC), feb, mar, 2 * 3.39},
		{"a February life in January's estimate: 0", gpu, gpuMonth, time.Date(2026, 2, 3, 0, 0, 0, 0, time.UTC), never, time.Date(2026, 2, 4, 0, 0, 0, 0, time.UTC), jan, feb, 0},
		{"ended in January, February estimate: 0", gpu, gpuMonth, at(3, 0, 0, 0), at(3, 1, 0, 0), time.Date(2026, 2, 4, 0, 0, 0, 0, time.UTC), feb, mar, 0},
		{"unpriced: 0", 0, 0, at(3, 0, 0, 0), at(3, 1, 0, 0), at(9, 0, 0, 0), jan, feb, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cost.DefaultRule.Charge(tc.hourly, tc.monthly, tc.start, tc.end, tc.now, tc.monthStart, tc.monthEnd)
			if !near(got, tc.want) {
				t.Fatalf("Charge = %.10f, want %.10f", got, tc.want)
			}
		})
	}
}

// TestVolumeCharge: a 100 GiB volume at $0.10 per GiB-month is $10 for a
// month (672 h or more) and per second below it.
func TestVolumeCharge(t *testing.T) {
	jan, feb := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		now  time.Time
		want float64
	}{
		{"336 h: half the month's price", jan.Add(336 * time.Hour), 5},
		{"one hour: 10/672", jan.Add(time.Hour), 10.0 / 672},
		{"the whole month: capped at $10", feb, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cost.DefaultRule.VolumeCharge(100, 0.10, jan, time.Time{}, tc.now, jan, feb)
			if !near(got, tc.want) {
				t.Fatalf("VolumeCharge = %.10f, want %.10f", got, tc.want)
			}
		})
	}
}

// TestParseMonth accepts YYYY-MM only and gives UTC bounds.
func TestParseMonth(t *testing.T) {
	s, e, err := cost.ParseMonth("2026-12")
	if err != nil || !s.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) || !e.Equal(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("ParseMonth(2026-12) = %v, %v, %v", s, e, err)
	}
	for _, bad := range []string{"", "2026-13", "2026-1", "2026-12-01", "december"} {
		if _, _, err := cost.ParseMonth(bad); err == nil {
			t.Errorf("ParseMonth(%q) accepted", bad)
		}
	}
}
