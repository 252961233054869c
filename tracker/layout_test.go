package tracker

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLayout checks what the types promise about memory: 64-bit fields on
// 8-byte offsets (atomics on 32-bit platforms need it; this test also runs
// under GOARCH=386), and the hot, read-mostly and cold parts of a Record on
// separate cache lines, away from any neighbouring object.
func TestLayout(t *testing.T) {
	var c Counter
	var r Record
	assert.Equal(t, uintptr(8), unsafe.Alignof(c), "Counter must be 8-byte aligned even on 32-bit platforms")
	assert.Equal(t, uintptr(8), unsafe.Alignof(r), "Record must be 8-byte aligned even on 32-bit platforms")
	for name, off := range map[string]uintptr{
		"Counter.cur": unsafe.Offsetof(c.cur), "Counter.peak": unsafe.Offsetof(c.peak),
		"Record.bytes": unsafe.Offsetof(r.bytes), "Record.counts": unsafe.Offsetof(r.counts), "Record.freedBytes": unsafe.Offsetof(r.freedBytes),
		"Record.peakBytes": unsafe.Offsetof(r.peakBytes), "Record.limit": unsafe.Offsetof(r.limit),
		"Record.foldSeq": unsafe.Offsetof(r.foldSeq), "Record.baseFailed": unsafe.Offsetof(r.baseFailed),
	} {
		assert.Zero(t, off%8, "%s at offset %d", name, off)
	}

	line := func(off uintptr) uintptr { return off / cacheLineSize }
	assert.NotEqual(t, line(unsafe.Offsetof(c.cur)), line(unsafe.Offsetof(c.peak)))
	hot := unsafe.Offsetof(r.bytes)
	assert.GreaterOrEqual(t, hot, uintptr(cacheLineSize), "the hot line needs a line of padding before it")
	assert.Equal(t, line(hot), line(unsafe.Offsetof(r.freedBytes)), "bytes, counts and freed bytes share the hot line")
	assert.Equal(t, hot+cacheLineSize, unsafe.Offsetof(r.peakBytes), "peaks start the next line")
	assert.Equal(t, line(unsafe.Offsetof(r.peakBytes)), line(unsafe.Offsetof(r.limit)))
	assert.Equal(t, hot+2*cacheLineSize, unsafe.Offsetof(r.foldSeq), "cold figures start the third line")
	end := unsafe.Offsetof(r.baseFailed) + 8
	assert.GreaterOrEqual(t, unsafe.Sizeof(r)-end, uintptr(cacheLineSize), "a line of padding after the cold figures")
}

// TestAlignedInStruct embeds the types after a byte, where a plain int64
// would sit at offset 4 on 32-bit platforms, and uses them: an unaligned
// 64-bit atomic panics there.
func TestAlignedInStruct(t *testing.T) {
	var s struct {
		b byte
		c Counter
		d byte
		r Record
	}
	assert.Zero(t, unsafe.Offsetof(s.c)%8)
	assert.Zero(t, unsafe.Offsetof(s.r)%8)
	require.NoError(t, s.c.Alloc(1))
	require.NoError(t, s.r.Alloc(1))
	assert.Equal(t, int64(1), s.r.Snapshot().Allocs)
}

// TestZeroAllocs asserts that no tracker path allocates on the heap.
func TestZeroAllocs(t *testing.T) {
	var c Counter
	var r Record
	var tab Table
	_, err := tab.Record(3)
	require.NoError(t, err)
	var lim Record
	require.NoError(t, lim.SetLimit(1<<40))
	var n int64
	for name, f := range map[string]func(){
		"Counter.Alloc+Free": func() { _ = c.Alloc(64); _ = c.Free(64) },
		"Counter.rising":     func() { n++; _ = c.Alloc(n) },
		"Counter.AllocWithin+Free": func() {
			_ = c.AllocWithin(64, 1<<40)
			_ = c.Free(64)
		},
		"Counter.read":       func() { _, _ = c.Current(), c.Peak() },
		"Counter.ResetPeak":  c.ResetPeak,
		"Record.Alloc+Free":  func() { _ = r.Alloc(64); _ = r.Free(64) },
		"Record.limited":     func() { _ = lim.Alloc(64); _ = lim.Free(64) },
		"Record.Snapshot":    func() { _ = r.Snapshot() },
		"Record.ResetPeak":   r.ResetPeak,
		"Record.ResetAccum":  r.ResetAccumulated,
		"Table.Lookup":       func() { _ = tab.Lookup(3) },
		"Table.Record(used)": func() { _, _ = tab.Record(3) },
	} {
		assert.Zero(t, testing.AllocsPerRun(1000, f), name)
	}
}
