package harness

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Bucket is one cumulative bucket of a Prometheus histogram: Count
// observations were at most Le (seconds, for chalupa's *_seconds series;
// +Inf for the last).
type Bucket struct {
	Le    float64
	Count float64
}

// PromHistogram is a Prometheus histogram without labels as scraped from a
// text exposition: its cumulative buckets in increasing Le, the last +Inf.
type PromHistogram []Bucket

// ParsePromHistogram reads the buckets of the unlabelled histogram name
// (the lines name_bucket{le="…"} N) from a Prometheus text exposition.
func ParsePromHistogram(r io.Reader, name string) (PromHistogram, error) {
	prefix := name + `_bucket{le="`
	var h PromHistogram
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		le, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			return nil, fmt.Errorf("%s: malformed bucket line", name)
		}
		b, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: malformed bucket line", name)
		}
		h = append(h, Bucket{Le: b, Count: n})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(h) == 0 {
		return nil, fmt.Errorf("no histogram %s", name)
	}
	sort.Slice(h, func(i, j int) bool { return h[i].Le < h[j].Le })
	if !math.IsInf(h[len(h)-1].Le, 1) {
		return nil, fmt.Errorf("%s: no +Inf bucket", name)
	}
	return h, nil
}

// Sub returns the observations made between prev and h (both of the same
// series): the bucket-wise difference.
func (h PromHistogram) Sub(prev PromHistogram) (PromHistogram, error) {
	if len(prev) != len(h) {
		return nil, errors.New("histograms have different buckets")
	}
	out := make(PromHistogram, len(h))
	for i := range h {
		if h[i].Le != prev[i].Le {
			return nil, errors.New("histograms have different buckets")
		}
		out[i] = Bucket{Le: h[i].Le, Count: h[i].Count - prev[i].Count}
	}
	return out, nil
}

// Count is the number of observations (the +Inf bucket).
func (h PromHistogram) Count() float64 {
	if len(h) == 0 {
		return 0
	}
	return h[len(h)-1].Count
}

// Quantile returns the q-quantile (0 < q ≤ 1) the way Prometheus'
// histogram_quantile estimates it (linear within the bucket that holds it,
// from 0 for the first bucket), and that bucket's upper bound: the true
// quantile is at most bound. Both are NaN with no observations; a quantile
// in the +Inf bucket gives the highest finite bound as estimate and +Inf
// as bound.
func (h PromHistogram) Quantile(q float64) (estimate, bound float64) {
	n := h.Count()
	if n <= 0 || len(h) < 2 {
		return math.NaN(), math.NaN()
	}
	rank := q * n
	i := sort.Search(len(h), func(i int) bool { return h[i].Count >= rank })
	if i == len(h)-1 {
		return h[len(h)-2].Le, math.Inf(1)
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h[i-1].Le, h[i-1].Count
	}
	in := h[i].Count - below
	if in <= 0 {
		return h[i].Le, h[i].Le
	}
	return lo + (h[i].Le-lo)*(rank-below)/in, h[i].Le
}
