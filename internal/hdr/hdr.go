// Package hdr is a small log-linear latency histogram in the spirit of
// HdrHistogram: values below 2^subBits are counted exactly, larger ones in
// buckets whose width is 1/2^subBits of their magnitude, so every reported
// percentile is within 1/128 (under 0.8%) of a value actually recorded.
// Recording is one array increment (no allocation), and histograms of
// several goroutines merge by adding counts, which is what a load generator
// with one histogram per producer needs.
package hdr

import (
	"math"
	"math/bits"
)

const (
	subBits  = 7 // 128 sub-buckets per power of two: relative error < 1/128
	subCount = 1 << subBits
	// buckets covers every non-negative int64: the largest index is
	// (63-subBits-1)*subCount + 2*subCount - 1.
	buckets = (64-subBits-1)*subCount + subCount
)

// Histogram counts non-negative int64 values (nanoseconds, bytes, …).
// The zero value is ready to use. It is not safe for concurrent use.
type Histogram struct {
	counts [buckets]uint64
	total  uint64
	sum    float64
	min    int64
	max    int64
}

// index maps v to its bucket: e is how far v must be shifted right to fit
// in subBits+1 bits, m the remaining mantissa (in [subCount, 2*subCount)
// once e > 0, or v itself when small). index = e*subCount + m is then
// monotonic in v and dense.
func index(v int64) int {
	u := uint64(v)
	e := bits.Len64(u) - (subBits + 1)
	if e < 0 {
		e = 0
	}
	return e*subCount + int(u>>uint(e))
}

// bounds returns the smallest and largest value that land in bucket i.
func bounds(i int) (lo, hi int64) {
	e := i/subCount - 1
	if e < 0 {
		e = 0
	}
	m := uint64(i - e*subCount)
	lo64 := m << uint(e)
	hi64 := (m+1)<<uint(e) - 1
	if hi64 > math.MaxInt64 || hi64 < lo64 {
		hi64 = math.MaxInt64
	}
	return int64(lo64), int64(hi64)
}

// Record counts one value; negative values count as 0.
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	if h.total == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.counts[index(v)]++
	h.total++
	h.sum += float64(v)
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.total == 0 {
		return
	}
	if h.total == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.sum += o.sum
}

// Reset empties h.
func (h *Histogram) Reset() { *h = Histogram{} }

// Count is the number of values recorded.
func (h *Histogram) Count() uint64 { return h.total }

// Min and Max are the exact extremes recorded (0 when empty).
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest value recorded.
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean of the values recorded (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.total == 0 {
		return 0
	}
	return h.sum / float64(h.total)
}

// Quantile returns the value at quantile q in [0, 1]: the upper bound of the
// bucket holding the ceil(q*count)-th smallest value, clamped to the recorded
// extremes. Reporting the upper bound errs on the side of higher latency.
func (h *Histogram) Quantile(q float64) int64 {
	if h.total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.total)))
	if rank < 1 {
		rank = 1
	}
	if rank > h.total {
		rank = h.total
	}
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bounds(i)
			return min(max(hi, h.min), h.max)
		}
	}
	return h.max
}
