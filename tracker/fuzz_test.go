package tracker

import (
	"encoding/binary"
	stdatomic "sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// model is the plain sequential specification of a Counter and a Record.
type model struct {
	cur, peak, live, peakLive  int64
	allocs, frees, aBytes, fBy int64
	failed, limit              int64
}

// op decodes one operation from 9 bytes: a code and an operand.
type op struct {
	code byte
	n    int64
}

func decodeOps(data []byte) []op {
	var ops []op
	for len(data) >= 9 {
		ops = append(ops, op{data[0], int64(binary.LittleEndian.Uint64(data[1:9]))})
		data = data[9:]
	}
	return ops
}

// operand keeps most operands small, so that sequences mostly succeed, while
// some stay huge or negative to exercise the refusals.
func operand(n int64) int64 {
	switch {
	case n%7 == 0:
		return n // anything, including negative and huge
	case n < 0:
		return -n % 1000 // small, sometimes zero
	default:
		return n % 1000
	}
}

// concurrently runs refused in a loop on another goroutine from before
// the step's own operation begins until the returned function is called,
// which reports how many calls of refused it made and how many of them did
// not fail. A step whose
// code has its top bit set runs a refused operation this way: the step must
// then behave, and leave every figure, exactly as in the sequential model,
// which never sees the refused operation.
func concurrently(refused func() error) (stop func() (calls, succeeded int)) {
	var quit stdatomic.Bool
	started, done := make(chan struct{}), make(chan [2]int)
	go func() {
		ok, i := 0, 0
		for ; ; i++ {
			if refused() == nil {
				ok++
			}
			if i == 0 {
				close(started)
			}
			if quit.Load() {
				break
			}
		}
		done <- [2]int{i + 1, ok}
	}()
	<-started
	return func() (int, int) {
		quit.Store(true)
		select {
		case r := <-done:
			return r[0], r[1]
		case <-time.After(10 * time.Second):
			panic("a refused operation never returned")
		}
	}
}

// refusedFree is a size more than a figure that starts at cur and may grow
// by at most grow during the step holds at any moment: a Free of it is
// refused (on the add-based fast path while it is at most fastMax).
func refusedFree(cur, grow int64) int64 { return cur + max(grow, 0) + 1 }

// encodeOps is the inverse of decodeOps, for seeds.
func encodeOps(ops ...op) []byte {
	var b []byte
	for _, o := range ops {
		b = append(b, o.code)
		b = binary.LittleEndian.AppendUint64(b, uint64(o.n))
	}
	return b
}

func seedOps(f *testing.F) {
	enc := encodeOps
	f.Add(enc(op{0, 100}, op{0, 50}, op{1, 120}, op{2, 0}, op{1, 30}))
	f.Add(enc(op{0, 10}, op{1, 11}, op{1, -1}, op{0, 0}))
	f.Add(enc(op{3, 500}, op{0, 400}, op{0, 200}, op{4, 0}, op{0, 7 * (1 << 40)}))
	f.Add(enc(op{0, -7}, op{0, 7 << 60}, op{1, 7 << 60}, op{5, 0}))
	f.Add(enc(op{0, 100}, op{128, 50}, op{129, 120}, op{160, 7}, op{161, 30}, op{131, 5}))
	f.Add(enc(op{0, 100}, op{131, 10}, op{131, 10}, op{131, 10}, op{131, 10}, op{129, 50}))
	f.Add(enc(op{0, 10}, op{131, 500}, op{128, 400}, op{164, 0}, op{133, 0}, op{162, 0}, op{129, 10}))
}

func FuzzCounter(f *testing.F) {
	seedOps(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Counter
		var m model
		for i, o := range decodeOps(data) {
			n := operand(o.n)
			wait := func() (int, int) { return 0, 0 }
			if o.code >= 128 {
				// The figure stays within [m.cur-n, m.cur+n] during the
				// step whatever its own operation does.
				lo := max(m.cur-max(n, 0), 0)
				switch o.code >> 5 & 3 {
				case 0:
					x := refusedFree(m.cur, n)
					wait = concurrently(func() error { return c.Free(x) })
				case 1:
					y := MaxCount - lo + 1 // more than fits from any figure >= lo
					wait = concurrently(func() error { return c.Alloc(y) })
				case 2:
					wait = concurrently(func() error { return c.AllocWithin(1, lo-1) })
				case 3:
					x := refusedFree(m.cur, n)
					wait = concurrently(func() error { return c.AllocWithin(x, x-1) })
				}
			}
			switch code := o.code % 4; code {
			case 0, 3:
				// Alloc is AllocWithin MaxCount, with an error of its own.
				limit, err := int64(MaxCount), error(nil)
				if code == 0 {
					err = c.Alloc(n)
				} else {
					limit = n * 2
					err = c.AllocWithin(n, limit)
				}
				ok := n > 0 && limit >= 0 && n <= min(limit, MaxCount)-m.cur
				require.Equal(t, ok, err == nil, "step %d: op %d of %d within %d on %d: %v", i, code, n, limit, m.cur, err)
				if ok {
					m.cur += n
					m.peak = max(m.peak, m.cur)
				}
			case 1:
				err := c.Free(n)
				ok := n > 0 && n <= m.cur
				require.Equal(t, ok, err == nil, "step %d: Free(%d) on %d: %v", i, n, m.cur, err)
				if ok {
					m.cur -= n
				}
			case 2:
				c.ResetPeak()
				m.peak = m.cur
			}
			_, ok := wait()
			require.Zero(t, ok, "step %d: a concurrent refused operation succeeded", i)
			cur, peak := c.Load()
			require.Equal(t, m.cur, cur, "step %d current", i)
			require.Equal(t, m.peak, peak, "step %d peak", i)
		}
	})
}

func FuzzRecord(f *testing.F) {
	seedOps(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Record
		var m model
		for i, o := range decodeOps(data) {
			n := operand(o.n)
			wait := func() (int, int) { return 0, 0 }
			failing := false // the concurrent operation counts failures
			if o.code >= 128 {
				switch code := o.code % 6; {
				case o.code>>5&1 == 0 || code == 3 || code == 4 || code == 5:
					// A refused Free counts nowhere, so it may race
					// limits, resets and failures too.
					x := refusedFree(m.cur, n)
					wait = concurrently(func() error { return r.Free(x) })
				default:
					// Past capacity from any figure the step leaves; each
					// refusal counts as a failure.
					y := MaxBytes - max(m.cur-max(n, 0), 0) + 1
					wait = concurrently(func() error { return r.Alloc(y) })
					failing = true
				}
			}
			switch o.code % 6 {
			case 0:
				err := r.Alloc(n)
				room := int64(MaxBytes)
				if m.limit > 0 {
					room = min(m.limit, MaxBytes)
				}
				ok := n > 0 && n <= room-m.cur && m.live < MaxBuffers
				require.Equal(t, ok, err == nil, "step %d: Alloc(%d) on %d: %v", i, n, m.cur, err)
				if ok {
					m.cur += n
					m.live++
					m.allocs++
					m.aBytes += n
					m.peak = max(m.peak, m.cur)
					m.peakLive = max(m.peakLive, m.live)
				} else if n > 0 {
					m.failed++
				}
			case 1:
				err := r.Free(n)
				ok := n > 0 && n <= m.cur && m.live > 0
				require.Equal(t, ok, err == nil, "step %d: Free(%d) on %d: %v", i, n, m.cur, err)
				if ok {
					m.cur -= n
					m.live--
					m.frees++
					m.fBy += n
				}
			case 2:
				r.ResetPeak()
				m.peak, m.peakLive = m.cur, m.live
			case 3:
				limit := n * 3
				err := r.SetLimit(limit)
				require.Equal(t, limit >= 0, err == nil, "step %d: SetLimit(%d): %v", i, limit, err)
				if err == nil {
					m.limit = limit
				}
			case 4:
				r.ResetAccumulated()
				m.allocs, m.frees, m.aBytes, m.fBy, m.failed = 0, 0, 0, 0, 0
			case 5:
				r.RecordFailure()
				m.failed++
			}
			calls, ok := wait()
			require.Zero(t, ok, "step %d: a concurrent refused operation succeeded", i)
			if failing {
				m.failed += int64(calls)
			}
			require.Equal(t, Stats{
				Tracked: m.cur, PeakTracked: m.peak, Buffers: m.live, PeakBuffers: m.peakLive,
				AllocBytes: m.aBytes, FreedBytes: m.fBy, Allocs: m.allocs, Frees: m.frees,
				FailedAllocs: m.failed, Limit: m.limit,
			}, r.Snapshot(), "step %d", i)
		}
	})
}
