package harness

import (
	"math/bits"
	"time"
)

// Histogram records durations in microseconds in log-linear buckets: exact
// below 2^subBits µs, then 2^subBits buckets per power of two, so any
// reported quantile is within 1/2^subBits (0.8 %) of the true value. Its
// memory is fixed (a few tens of KiB) however many samples it holds, which is
// what keeps a long or fast run bounded.
type Histogram struct {
	counts []uint64
	n      uint64
	sum    uint64 // µs
	max    uint64 // µs
}

const (
	subBits    = 7
	subBuckets = 1 << subBits
	// maxShift covers values up to 2^(maxShift+subBits+1) µs, about 38
	// hours: far beyond any request timeout. Larger values are clamped.
	maxShift = 30
)

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	return &Histogram{counts: make([]uint64, (maxShift+2)*subBuckets)}
}

// bucketOf returns the bucket index of v µs.
func bucketOf(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	shift := bits.Len64(v) - 1 - subBits
	if shift > maxShift {
		return (maxShift+2)*subBuckets - 1
	}
	return shift*subBuckets + int(v>>uint(shift))
}

// bucketLow returns the smallest value held by bucket i, and its width.
func bucketLow(i int) (low, width uint64) {
	if i < 2*subBuckets {
		return uint64(i), 1
	}
	shift := i/subBuckets - 1
	mant := uint64(i - shift*subBuckets)
	return mant << uint(shift), 1 << uint(shift)
}

// Record adds one duration (negative counts as zero).
func (h *Histogram) Record(d time.Duration) {
	v := uint64(0)
	if d > 0 {
		v = uint64(d / time.Microsecond)
	}
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += v
	if v > h.max {
		h.max = v
	}
}

// Merge adds every sample of o.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	if o.max > h.max {
		h.max = o.max
	}
}

// Count is the number of samples.
func (h *Histogram) Count() uint64 { return h.n }

// Quantile returns the q-quantile (0 < q ≤ 1) as a duration: the middle of
// the bucket holding the sample of that rank, never above the maximum.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n) + 0.5)
	if rank < 1 {
		rank = 1
	}
	if rank > h.n {
		rank = h.n
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			low, width := bucketLow(i)
			v := low + width/2
			if v > h.max {
				v = h.max
			}
			return time.Duration(v) * time.Microsecond
		}
	}
	return time.Duration(h.max) * time.Microsecond
}

// Max is the largest sample.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) * time.Microsecond }

// Mean is the mean sample.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum/h.n) * time.Microsecond
}
