package hdr

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// within reports whether got is within the histogram's relative error of want.
func within(got, want int64) bool {
	return math.Abs(float64(got-want)) <= float64(want)/subCount+1
}

func TestIndexBoundsRoundTrip(t *testing.T) {
	vals := []int64{0, 1, 127, 128, 129, 255, 256, 257, 1000, 1 << 20, 123456789, 1 << 40, math.MaxInt64}
	for _, v := range vals {
		i := index(v)
		if i < 0 || i >= buckets {
			t.Fatalf("index(%d) = %d out of range", v, i)
		}
		lo, hi := bounds(i)
		if v < lo || v > hi {
			t.Fatalf("value %d in bucket %d whose bounds are [%d, %d]", v, i, lo, hi)
		}
		if v >= subCount && float64(hi-lo+1) > float64(lo)/subCount+1 {
			t.Fatalf("bucket [%d, %d] wider than the relative error", lo, hi)
		}
	}
	// Buckets are monotonic and contiguous over a range of values.
	prev := -1
	for v := int64(0); v < 1<<16; v++ {
		i := index(v)
		if i != prev && i != prev+1 {
			t.Fatalf("index(%d) = %d after %d: not contiguous", v, i, prev)
		}
		prev = i
	}
}

func TestSmallValuesExact(t *testing.T) {
	var h Histogram
	for v := int64(1); v <= 100; v++ {
		h.Record(v)
	}
	for _, c := range []struct {
		q    float64
		want int64
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}, {0, 1}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %d, want %d", c.q, got, c.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 || h.Mean() != 50.5 {
		t.Errorf("count %d min %d max %d mean %v", h.Count(), h.Min(), h.Max(), h.Mean())
	}
}

func TestUniformPercentiles(t *testing.T) {
	var h Histogram
	const n = 1_000_000
	for v := int64(1); v <= n; v++ {
		h.Record(v * 1000) // 1µs .. 1s in ns
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := int64(math.Ceil(q*n)) * 1000
		if got := h.Quantile(q); !within(got, want) {
			t.Errorf("Quantile(%v) = %d, want %d ±%.2f%%", q, got, want, 100.0/subCount)
		}
	}
	if h.Max() != n*1000 || h.Quantile(1) != n*1000 {
		t.Errorf("max %d, Quantile(1) %d", h.Max(), h.Quantile(1))
	}
}

// TestTailNotHidden: a rare slow outlier shows at the percentile that covers it.
func TestTailNotHidden(t *testing.T) {
	var h Histogram
	for i := 0; i < 9990; i++ {
		h.Record(1_000_000) // 1ms
	}
	for i := 0; i < 10; i++ {
		h.Record(1_000_000_000) // 1s
	}
	if got := h.Quantile(0.99); !within(got, 1_000_000) {
		t.Errorf("p99 = %d, want 1ms", got)
	}
	if got := h.Quantile(0.999); !within(got, 1_000_000) {
		t.Errorf("p99.9 = %d, want 1ms (rank 9990 is the last fast one)", got)
	}
	if got := h.Quantile(0.9991); !within(got, 1_000_000_000) {
		t.Errorf("p99.91 = %d, want 1s", got)
	}
}

// TestExponentialAndMerge: percentiles of an exponential distribution match
// the exact order statistics, and merging per-producer histograms equals one
// histogram of everything.
func TestExponentialAndMerge(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 200_000
	vals := make([]int64, n)
	var parts [4]Histogram
	var all Histogram
	for i := range vals {
		v := int64(r.ExpFloat64() * 2e6) // mean 2ms
		vals[i] = v
		parts[i%4].Record(v)
		all.Record(v)
	}
	var merged Histogram
	for i := range parts {
		merged.Merge(&parts[i])
	}
	if merged.counts != all.counts || merged.Count() != n || merged.Max() != all.Max() || merged.Min() != all.Min() {
		t.Fatal("merged histogram differs from the histogram of all values")
	}
	sorted := append([]int64(nil), vals...)
	slices.Sort(sorted)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		want := sorted[int(math.Ceil(q*n))-1]
		if got := merged.Quantile(q); got < want || !within(got, want) {
			t.Errorf("Quantile(%v) = %d, exact %d", q, got, want)
		}
	}
}

func TestEmptyAndNegative(t *testing.T) {
	var h Histogram
	if h.Quantile(0.5) != 0 || h.Mean() != 0 {
		t.Error("empty histogram should report 0")
	}
	h.Record(-5)
	if h.Quantile(1) != 0 || h.Min() != 0 {
		t.Error("negative values count as 0")
	}
	h.Reset()
	if h.Count() != 0 {
		t.Error("Reset kept values")
	}
}

func BenchmarkRecord(b *testing.B) {
	var h Histogram
	for i := 0; b.Loop(); i++ {
		h.Record(int64(i) * 997)
	}
}
