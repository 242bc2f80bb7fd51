// Package defaults fills in settings left unset. A zero or negative
// number means "not set" throughout PicoMQ's configs, so every config's
// defaulting is a list of Set calls rather than one if-block per field.
package defaults

// Set sets *v to def when *v is zero or negative.
func Set[T ~int | ~int32 | ~int64 | ~float64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}
