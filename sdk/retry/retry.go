// Package retry is PicoMQ's one backoff rule, shared by every retry loop
// of the server (object uploads, the flush loop, the membership rejoin
// loop) and of the Go client (read-shaped calls, a Producer's batches, SSE
// reconnects), so they cannot drift apart:
//
//   - the nominal wait before retry n is Initial·2^(n-1), capped at Max;
//   - the actual wait is drawn uniformly from [nominal/2, nominal], so
//     nodes or clients that failed together do not retry in lockstep, and
//     no wait exceeds Max.
//
// The draw is github.com/cenkalti/backoff's ExponentialBackOff, centred at
// three quarters of the nominal wait with a randomization factor of 1/3.
// It lives in the sdk module (not the server's internal/) because the Go
// client, a module of its own, follows the same rule.
package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Policy is the rule's two parameters. Zero or negative values are raised
// to 1 ms (Initial) and Initial (Max).
type Policy struct {
	Initial, Max time.Duration
}

func (p Policy) normalized() Policy {
	p.Initial = max(p.Initial, time.Millisecond)
	p.Max = max(p.Max, p.Initial)
	return p
}

// Backoff is the state of one retry loop: Next is the wait before the
// next retry, Reset starts over after a success. Not safe for concurrent
// use (each loop owns one).
type Backoff struct {
	e backoff.ExponentialBackOff
}

// Backoff returns a fresh loop state following p.
func (p Policy) Backoff() *Backoff {
	p = p.normalized()
	return &Backoff{e: backoff.ExponentialBackOff{
		InitialInterval:     p.Initial * 3 / 4,
		RandomizationFactor: 1.0 / 3,
		Multiplier:          2,
		MaxInterval:         p.Max * 3 / 4,
	}}
}

// Next returns the wait before the next retry and advances the state.
func (b *Backoff) Next() time.Duration { return b.e.NextBackOff() }

// Reset makes the next wait the first one again.
func (b *Backoff) Reset() { b.e.Reset() }

// maxDoublings bounds Delay's walk: past it the nominal wait is Max for
// any Policy (2^62 ns is 146 years).
const maxDoublings = 62

// Delay is the wait before retry number attempt (1 = the first retry),
// for loops that count their attempts.
func (p Policy) Delay(attempt int) time.Duration {
	b := p.Backoff()
	for range min(attempt, maxDoublings) - 1 {
		b.Next()
	}
	return b.Next()
}

// Sleep waits d, or until ctx ends (then it returns ctx's error).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
