package memtrack

import (
	"encoding/binary"
	"testing"

	"github.com/memtrack/memtrack/tracker"
	"github.com/stretchr/testify/require"
)

// catModel is the sequential specification of one category's figures, and
// of the device's beside them.
type catModel struct {
	cur, peak, live, peakLive         int64
	allocs, frees, aBytes, fBytes     int64
	failed, limit                     int64
	devCur, devLimit, devFailed, rest int64 // the device's bytes, limit, failures; uncategorised bytes
	restLive, backend                 int64 // uncategorised buffers; the bytes the fake backend holds
}

// fuzzCapacity is the fake device's memory in FuzzCategory.
const fuzzCapacity = 1 << 40

// FuzzCategory drives one category and the memory outside it on one device
// with a sequence of operations (9 bytes each: a code and an operand), and
// after each step compares the category's figures, the device's and the
// uncategorised row with a sequential model.
func FuzzCategory(f *testing.F) {
	enc := func(ops ...[2]int64) []byte {
		var b []byte
		for _, o := range ops {
			b = append(b, byte(o[0]))
			b = binary.LittleEndian.AppendUint64(b, uint64(o[1]))
		}
		return b
	}
	f.Add(enc([2]int64{0, 100}, [2]int64{0, 50}, [2]int64{2, 0}, [2]int64{1, 30}, [2]int64{3, 0}))
	f.Add(enc([2]int64{4, 120}, [2]int64{0, 100}, [2]int64{0, 50}, [2]int64{6, 0}, [2]int64{2, 0}, [2]int64{0, 50}))
	f.Add(enc([2]int64{5, 150}, [2]int64{1, 100}, [2]int64{0, 100}, [2]int64{7, 0}, [2]int64{8, 40}, [2]int64{9, 0}))
	f.Add(enc([2]int64{0, -3}, [2]int64{4, -1}, [2]int64{0, 0}, [2]int64{2, 0}, [2]int64{3, 0}))
	f.Fuzz(runFuzzCategory)
}

// runFuzzCategory is one input of FuzzCategory.
func runFuzzCategory(t *testing.T, data []byte) {
	{
		_, ds := fakeCUDA(t, 1, fuzzCapacity)
		d := ds[0]
		c, err := d.Category("fuzz")
		require.NoError(t, err)
		var m catModel
		var in, out []*Buffer // live buffers in the category and outside it
		var tracked []*Tracked
		for i := 0; len(data) >= 9; i, data = i+1, data[9:] {
			code := data[0] % 10
			n := int64(binary.LittleEndian.Uint64(data[1:9]))
			if n%7 != 0 {
				n %= 1000
				if n < 0 {
					n = -n
				}
			}
			switch code {
			case 0, 8: // an allocation or a Track in the category
				var err error
				if code == 0 {
					var b *Buffer
					if b, err = c.Alloc(n); err == nil {
						in = append(in, b)
					}
				} else {
					var h *Tracked
					if h, err = c.Track(n, 0); err == nil {
						tracked = append(tracked, h)
					}
				}
				ok := n > 0 && (m.limit == 0 || n <= m.limit-m.cur) && (m.devLimit == 0 || n <= m.devLimit-m.devCur) && n <= tracker.MaxBytes-m.devCur
				if code == 0 {
					ok = ok && n <= fuzzCapacity-m.backend
				}
				require.Equal(t, ok, err == nil, "step %d: category alloc of %d: %v", i, n, err)
				if ok && code == 0 {
					m.backend += n
				}
				if ok {
					m.cur += n
					m.devCur += n
					m.live++
					m.allocs++
					m.aBytes += n
					m.peak = max(m.peak, m.cur)
					m.peakLive = max(m.peakLive, m.live)
				} else if n > 0 {
					m.failed++
					m.devFailed++
				}
			case 1: // an allocation outside it
				b, err := d.Alloc(n)
				ok := n > 0 && (m.devLimit == 0 || n <= m.devLimit-m.devCur) && n <= fuzzCapacity-m.backend
				require.Equal(t, ok, err == nil, "step %d: alloc of %d: %v", i, n, err)
				if ok {
					out = append(out, b)
					m.backend += n
					m.devCur += n
					m.rest += n
					m.restLive++
				} else if n > 0 {
					m.devFailed++
				}
			case 2: // free the category's oldest buffer or handle
				if len(in) > 0 {
					b := in[0]
					in = in[1:]
					require.NoError(t, b.Free())
					m.free(b.Size())
					m.backend -= b.Size()
				} else if len(tracked) > 0 {
					h := tracked[0]
					tracked = tracked[1:]
					require.NoError(t, h.Release())
					m.free(h.Size())
				}
			case 3: // free the newest buffer outside it
				if k := len(out); k > 0 {
					b := out[k-1]
					out = out[:k-1]
					require.NoError(t, b.Free())
					m.backend -= b.Size()
					m.devCur -= b.Size()
					m.rest -= b.Size()
					m.restLive--
				}
			case 4, 5: // a limit, the category's or the device's
				lim := n
				set := c.SetMemoryLimit
				if code == 5 {
					set = d.SetMemoryLimit
				}
				err := set(lim)
				require.Equal(t, lim >= 0, err == nil, "step %d: limit %d: %v", i, lim, err)
				if lim >= 0 && code == 4 {
					m.limit = lim
				} else if lim >= 0 {
					m.devLimit = lim
				}
			case 6:
				d.ResetPeakMemoryStats()
				m.peak, m.peakLive = m.cur, m.live
			case 7:
				d.ResetAccumulatedMemoryStats()
				m.allocs, m.frees, m.aBytes, m.fBytes, m.failed = 0, 0, 0, 0, 0
			case 9: // a free of a buffer again: refused, nothing moves
				if len(in) > 0 {
					b := in[len(in)-1]
					require.NoError(t, b.Free())
					m.free(b.Size())
					m.backend -= b.Size()
					in = in[:len(in)-1]
					require.ErrorIs(t, b.Free(), ErrDoubleFree)
				}
			}
			require.Equal(t, CategoryStats{
				Device: d, Category: "fuzz",
				Tracked: m.cur, PeakTracked: m.peak, Buffers: m.live, PeakBuffers: m.peakLive,
				Allocs: m.allocs, Frees: m.frees, AllocBytes: m.aBytes, FreedBytes: m.fBytes,
				FailedAllocs: m.failed, Limit: m.limit,
			}, c.Stats(), "step %d: the category", i)
			require.Equal(t, m.devCur, d.MemoryAllocated(), "step %d: the device", i)
			rest := rowOf(t, d, Uncategorised)
			require.Equal(t, m.rest, rest.Tracked, "step %d: uncategorised", i)
			require.Equal(t, m.restLive, rest.Buffers, "step %d: uncategorised buffers", i)
		}
		for _, b := range append(in, out...) {
			require.NoError(t, b.Free())
		}
		for _, h := range tracked {
			require.NoError(t, h.Release())
		}
	}
}

// free counts a free of n bytes in the category.
func (m *catModel) free(n int64) {
	m.cur -= n
	m.devCur -= n
	m.live--
	m.frees++
	m.fBytes += n
}
