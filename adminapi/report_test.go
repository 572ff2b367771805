package adminapi_test

import (
	"math"
	"testing"

	"github.com/chalupa-run/chalupa/adminapi"
)

// TestLatencyEstimateMs: a quantile is interpolated linearly within the
// bucket its rank falls in, from the previous bound (0 for the first
// bucket) to its own, as Prometheus's histogram_quantile does; past the
// last bound it is that bound and over; without requests or with buckets
// that do not fit the bounds there is none (docs/operations.md,
// "Operations report").
func TestLatencyEstimateMs(t *testing.T) {
	bounds := []float64{0.5, 1, 2.5, 5, 10, 20, 50, 100, 250, 500, 1000, 2500, 5000}
	buckets := func(n map[int]int64) []int64 {
		b := make([]int64, len(bounds)+1)
		for i, c := range n {
			b[i] = c
		}
		return b
	}
	for _, tc := range []struct {
		name     string
		buckets  []int64
		q        float64
		want     float64
		over, ok bool
	}{
		// 100 requests, 94 at most 500 ms and 6 in (500, 1000]: rank 99
		// is the 5th of those 6, 500 + 500·5/6 ms.
		{"p99 within (500, 1000]", buckets(map[int]int64{9: 94, 10: 6}), 0.99, 500 + 500*5.0/6, false, true},
		// 100 requests in (500, 1000]: rank 99 is 99/100 into it.
		{"p99 of one bucket", buckets(map[int]int64{10: 100}), 0.99, 995, false, true},
		// The first bucket starts at 0: rank 1 of 4 is 0.125 ms.
		{"p25 in the first bucket", buckets(map[int]int64{0: 4}), 0.25, 0.125, false, true},
		// Rank 50 of 100 is the last of the ≤1 ms bucket: its bound.
		{"p50 at a bucket's top", buckets(map[int]int64{1: 50, 4: 50}), 0.5, 1, false, true},
		// Empty buckets between are skipped: rank 51 is the first of
		// (5, 10].
		{"p51 after empty buckets", buckets(map[int]int64{1: 50, 4: 50}), 0.51, 5 + 5*1.0/50, false, true},
		// Rank 99 falls among the two past 5000 ms.
		{"p99 past the last bound", buckets(map[int]int64{1: 98, 13: 2}), 0.99, 5000, true, true},
		{"no requests", buckets(nil), 0.99, 0, false, false},
		{"buckets not fitting the bounds", []int64{1, 2}, 0.5, 0, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, over, ok := adminapi.LatencyEstimateMs(bounds, tc.buckets, tc.q)
			if math.Abs(ms-tc.want) > 1e-9 || over != tc.over || ok != tc.ok {
				t.Errorf("LatencyEstimateMs(q %v) = %v, %v, %v; want %v, %v, %v", tc.q, ms, over, ok, tc.want, tc.over, tc.ok)
			}
		})
	}
}
