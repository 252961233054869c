package hostmem

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// capacityHost is a machine whose capacity the test sets, and a clock that
// moves only when told; each counts its reads.
type capacityHost struct {
	t            time.Time
	figure       int64
	err          error
	reads, times int
}

func (h *capacityHost) now() time.Time { h.times++; return h.t }

func (h *capacityHost) read() (int64, error) { h.reads++; return h.figure, h.err }

// capacityStep is one request to a Capacity: the clock moves by after,
// the machine's capacity becomes figure (or its read fails with err), and
// size bytes are asked for beside held; want is the capacity that refuses
// them (0: they fit), and reads and times are the reads of the capacity and
// of the clock the request makes.
type capacityStep struct {
	after        time.Duration
	figure       int64
	err          error
	size, held   int64
	want         int64
	reads, times int
}

// TestCapacityRereads runs requests against a Capacity read first (when
// the CPU backend's device table is made) at 8 MiB, or where that read
// fails, as the backend asks it (Fits for a request under its threshold of
// 1 MiB, then Refuses): the figure is kept for CapacityValidity and read
// again by the first request that needs it after; a failed read keeps the
// old figure; a small request that fits reads nothing, even past
// CapacityValidity; where the capacity is unknown, nothing is refused.
func TestCapacityRereads(t *testing.T) {
	const (
		threshold = 1 << 20 // the CPU backend's: smaller requests come from the Go heap
		small     = 512 << 10
		large     = 4 << 20
		stale     = CapacityValidity + time.Millisecond
	)
	noFigures := errors.New("no /proc/meminfo")
	for _, tc := range []struct {
		name     string
		firstErr error // the first read's error; else it reads 8 MiB
		steps    []capacityStep
	}{
		{"within validity the figure is kept", nil, []capacityStep{
			{after: CapacityValidity - time.Nanosecond, figure: 3 << 20, size: large, want: 0, times: 1},
			{figure: 3 << 20, size: 8 << 20, held: small, want: 8 << 20, times: 1},
		}},
		{"a lowered capacity is read once stale", nil, []capacityStep{
			{after: stale, figure: 3 << 20, size: large, want: 3 << 20, reads: 1, times: 1},
			{figure: 3 << 20, size: 2 << 20, held: 1 << 20, want: 0, times: 1},
			{figure: 3 << 20, size: 2 << 20, held: 1<<20 + 1, want: 3 << 20, times: 1},
		}},
		{"read again at exactly CapacityValidity", nil, []capacityStep{
			{after: CapacityValidity, figure: 3 << 20, size: large, want: 3 << 20, reads: 1, times: 1},
		}},
		{"a raised capacity is read once stale", nil, []capacityStep{
			{after: stale, figure: 16 << 20, size: 12 << 20, want: 0, reads: 1, times: 1},
			{after: stale, figure: 16 << 20, size: 16 << 20, held: 1, want: 16 << 20, reads: 1, times: 1},
		}},
		{"a failed read keeps the figure until the next one", nil, []capacityStep{
			{after: stale, err: noFigures, size: 8<<20 + 1, want: 8 << 20, reads: 1, times: 1},
			{after: CapacityValidity - time.Nanosecond, figure: 16 << 20, size: 8<<20 + 1, want: 8 << 20, times: 1},
			{after: time.Nanosecond, figure: 16 << 20, size: 8<<20 + 1, want: 0, reads: 1, times: 1},
		}},
		{"a read of no figure keeps the old one", nil, []capacityStep{
			{after: stale, figure: 0, size: 8<<20 + 1, want: 8 << 20, reads: 1, times: 1},
			{after: stale, figure: -1, size: large, held: 4<<20 + 1, want: 8 << 20, reads: 1, times: 1},
		}},
		{"a small request that fits reads nothing", nil, []capacityStep{
			{after: stale, figure: 1 << 20, size: small, held: 8<<20 - small, want: 0},
			{after: stale, figure: 1 << 20, size: threshold - 1, held: 2, want: 0},
		}},
		{"a small request the stale figure refuses reads it again", nil, []capacityStep{
			{after: stale, figure: 32 << 20, size: small, held: 8<<20 - small + 1, want: 0, reads: 1, times: 1},
			{figure: 1 << 20, size: small, held: 32<<20 - small, want: 0},
		}},
		{"a small request refused within validity reads only the clock", nil, []capacityStep{
			{figure: 32 << 20, size: small, held: 8<<20 - small + 1, want: 8 << 20, times: 1},
		}},
		{"an unknown capacity refuses nothing", noFigures, []capacityStep{
			{err: noFigures, size: 1 << 40, want: 0, times: 1},
			{err: noFigures, size: threshold - 1, held: 1 << 40, want: 0},
			{after: CapacityValidity, err: noFigures, size: 1 << 40, want: 0, reads: 1, times: 1},
			{after: CapacityValidity, figure: 3 << 20, size: large, want: 3 << 20, reads: 1, times: 1},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &capacityHost{t: time.Unix(1e9, 0), figure: 8 << 20, err: tc.firstErr}
			var c Capacity
			first := c.Get(h.t, h.read)
			if tc.firstErr == nil {
				assert.Equal(t, int64(8<<20), first, "the first read")
			} else {
				assert.Zero(t, first, "a first read that fails: unknown")
			}
			for i, s := range tc.steps {
				h.t = h.t.Add(s.after)
				h.figure, h.err = s.figure, s.err
				h.reads, h.times = 0, 0
				var got int64
				if s.size >= threshold || !c.Fits(s.size, s.held) { // as the backend's alloc asks
					got = c.Refuses(s.size, s.held, h.now(), h.read)
				}
				assert.Equal(t, s.want, got, "step %d: %d bytes beside %d", i, s.size, s.held)
				assert.Equal(t, s.reads, h.reads, "step %d: reads of the capacity", i)
				assert.Equal(t, s.times, h.times, "step %d: reads of the clock", i)
			}
		})
	}
}
