package harness

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestPromHistogramDeltaQuantiles(t *testing.T) {
	const expo = `# HELP x_seconds a test
# TYPE x_seconds histogram
x_seconds_bucket{le="0.01"} %d
x_seconds_bucket{le="0.1"} %d
x_seconds_bucket{le="1"} %d
x_seconds_bucket{le="+Inf"} %d
x_seconds_sum 1
x_seconds_count %d
other_bucket{le="0.01"} 99
`
	before, err := ParsePromHistogram(strings.NewReader(fmt.Sprintf(expo, 5, 5, 5, 5, 5)), "x_seconds")
	if err != nil {
		t.Fatal(err)
	}
	// 100 new observations: 40 ≤ 10 ms, 50 in (10, 100] ms, 9 in (0.1, 1] s, 1 beyond.
	after, err := ParsePromHistogram(strings.NewReader(fmt.Sprintf(expo, 45, 95, 104, 105, 105)), "x_seconds")
	if err != nil {
		t.Fatal(err)
	}
	d, err := after.Sub(before)
	if err != nil {
		t.Fatal(err)
	}
	if d.Count() != 100 {
		t.Fatalf("count %v, want 100", d.Count())
	}
	// Rank 50 is the 10th of 50 in (0.01, 0.1]: 0.01 + 0.09·10/50.
	if est, le := d.Quantile(0.5); math.Abs(est-0.028) > 1e-9 || le != 0.1 {
		t.Errorf("median %v (bucket %v), want 0.028 (0.1)", est, le)
	}
	if est, le := d.Quantile(0.99); math.Abs(est-1) > 1e-9 || le != 1 {
		t.Errorf("p99 %v (bucket %v), want 1 (1)", est, le)
	}
	if est, le := d.Quantile(0.995); est != 1 || !math.IsInf(le, 1) {
		t.Errorf("p99.5 %v (bucket %v), want 1 (+Inf)", est, le)
	}
	if _, err := ParsePromHistogram(strings.NewReader("y 1\n"), "x_seconds"); err == nil {
		t.Error("a missing histogram parsed")
	}
}
