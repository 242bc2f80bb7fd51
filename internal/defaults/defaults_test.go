package defaults

import (
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	for _, tc := range []struct{ v, want time.Duration }{{0, time.Second}, {-1, time.Second}, {2, 2}} {
		v := tc.v
		Set(&v, time.Second)
		if v != tc.want {
			t.Errorf("Set(%v, 1s) = %v, want %v", tc.v, v, tc.want)
		}
	}
}
