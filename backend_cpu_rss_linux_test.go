package memtrack

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rss returns the resident set size of the process, from /proc/self/statm.
func rss(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/statm")
	require.NoError(t, err)
	f := strings.Fields(string(data))
	require.GreaterOrEqual(t, len(f), 2)
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return pages * int64(os.Getpagesize())
}

// TestCPURSSFollowsTrackedFigure allocates and touches a 256 MiB buffer: the
// resident memory rises by about that much, and falls back on Free, because
// large buffers are mapped from the OS and unmapped on Free.
func TestCPURSSFollowsTrackedFigure(t *testing.T) {
	const size = 256 << 20
	before := rss(t)
	b, err := CPU().Alloc(size)
	require.NoError(t, err)
	p := b.Bytes()
	for i := 0; i < len(p); i += os.Getpagesize() {
		p[i] = 1
	}
	during := rss(t)
	require.NoError(t, b.Free())
	after := rss(t)
	assert.Greater(t, during-before, int64(size*9/10), "RSS rose by %d for a %d-byte buffer", during-before, size)
	assert.Less(t, after-before, int64(size/10), "RSS stayed %d above where it started after Free", after-before)
}

// touch writes every page of b's memory, making it resident.
func touch(b *Buffer) {
	p := b.Bytes()
	for i := 0; i < len(p); i += os.Getpagesize() {
		p[i] = 1
	}
}

// TestCPUNotResident: CPU buffers from 1 MiB are mapped from the OS, and
// pages never written are not resident, so the CPU's Used (the resident
// set) leaves them out. Usage counts memtrack's own mappings that are not
// resident as NotResident, exactly, and Untracked is Used + NotResident -
// Tracked: never negative, 96 MiB not yet written included.
func TestCPUNotResident(t *testing.T) {
	d := freshCPU(t)
	w, err := d.Category(CategoryWeights)
	require.NoError(t, err)
	kv, err := d.Category(CategoryKVCache)
	require.NoError(t, err)
	a, err := w.Alloc(48 << 20)
	require.NoError(t, err)
	b, err := kv.Alloc(48 << 20)
	require.NoError(t, err)
	small := mustAlloc(t, d, 4096) // from the Go heap: not a mapping
	u, err := d.Usage()
	require.NoError(t, err)
	assert.Equal(t, int64(96<<20+4096), u.Tracked)
	assert.Equal(t, int64(96<<20), u.NotResident, "nothing written: all of both mappings")
	assert.GreaterOrEqual(t, u.Untracked, int64(0))
	assert.Equal(t, max(u.Used+u.NotResident-u.Tracked, 0), u.Untracked)
	assert.NotContains(t, d.MemorySummary(), "untracked -")

	touch(a)
	u, err = d.Usage()
	require.NoError(t, err)
	assert.Equal(t, int64(48<<20), u.NotResident, "the written one is resident")
	assert.GreaterOrEqual(t, u.Untracked, int64(0))
	require.NoError(t, a.Free())
	require.NoError(t, b.Free())
	require.NoError(t, small.Free())
	u, err = d.Usage()
	require.NoError(t, err)
	assert.Zero(t, u.NotResident, "no mapping left")
}

// TestCPUBudgetWeightsNotWritten: Measurement.Budget sets the weights aside
// whether or not they were written. 1 GiB of weights, then a pass that
// peaks 256 MiB higher: the budget sets aside the weights and the peak
// (1280 MiB) and the untracked growth of the process, which is small, in
// both cases, and offers the same.
func TestCPUBudgetWeightsNotWritten(t *testing.T) {
	if testing.Short() {
		t.Skip("maps 1.25 GiB and writes 1 GiB")
	}
	const weights, pass, block = 1 << 30, 256 << 20, 16 << 20
	const noise = 64 << 20 // the Go heap and the rest of the process between the readings
	var setAside []int64
	for _, written := range []bool{false, true} {
		t.Run(fmt.Sprintf("written=%v", written), func(t *testing.T) {
			d := freshCPU(t)
			base, err := d.Baseline()
			require.NoError(t, err)
			w, err := d.Category(CategoryWeights)
			require.NoError(t, err)
			wb, err := w.Alloc(weights)
			require.NoError(t, err)
			defer wb.Free()
			if written {
				touch(wb)
			}
			m, err := d.Measure(func() error {
				b, err := d.Alloc(pass)
				if err != nil {
					return err
				}
				return b.Free()
			})
			require.NoError(t, err)
			b, err := m.Budget(base, 0.5, block)
			require.NoError(t, err)
			assert.Equal(t, int64(weights), b.Weights)
			assert.Equal(t, int64(pass), b.PeakIncrease)
			assert.InDelta(t, 0, b.UntrackedIncrease, noise, "the weights are not untracked memory released")
			assert.InDelta(t, weights+pass, b.SetAside, noise)
			setAside = append(setAside, b.SetAside)
		})
	}
	require.Len(t, setAside, 2)
	assert.InDelta(t, setAside[0], setAside[1], noise, "written or not, the same is set aside")
}

// BenchmarkCPUNotResident measures the reading of Usage.NotResident beside
// the rest of Device.Usage, for the mapped buffers given (the small ones
// come from the Go heap and cost nothing): one op is one Usage.
//
//	go test -run '^$' -bench CPUNotResident -benchtime 200x .
func BenchmarkCPUNotResident(b *testing.B) {
	for _, bc := range []struct {
		name    string
		n       int
		size    int64
		written bool
	}{
		{"none", 0, 0, false},
		{"1x1GiB-unwritten", 1, 1 << 30, false},
		{"1x1GiB-written", 1, 1 << 30, true},
		{"64x16MiB-written", 64, 16 << 20, true},
		{"1024x1MiB-written", 1024, 1 << 20, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			d := freshCPU(b)
			bufs := make([]*Buffer, bc.n)
			for i := range bufs {
				var err error
				bufs[i], err = d.Alloc(bc.size)
				require.NoError(b, err)
				if bc.written {
					touch(bufs[i])
				}
			}
			b.Run("Usage", func(b *testing.B) {
				for b.Loop() {
					if _, err := d.Usage(); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("NotResident", func(b *testing.B) {
				for b.Loop() {
					d.notResident()
				}
			})
			for _, x := range bufs {
				require.NoError(b, x.Free())
			}
		})
	}
}
