package memtrack

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReservationLeak: a reservation dropped without Release leaves its
// mappings unreachable, and the leak watch reports each, and with
// FreeLeaks unmaps it, giving its memory back; the address space stays.
func TestReservationLeak(t *testing.T) {
	cpu := freshCPU(t) // the leak stays counted: on a table of its own
	g, err := cpu.MapGranularity()
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	require.NoError(t, err)
	leaks := make(chan Leak, 4)
	require.NoError(t, cpu.Leaks().Enable(LeakWatch{FreeLeaks: true, Handler: func(l Leak) {
		if l.Size == 3*g {
			leaks <- l
		}
	}}))
	defer cpu.Leaks().Disable()
	before := cpu.MemoryStats()
	func() {
		r, err := cpu.Reserve(4 * g)
		require.NoError(t, err)
		require.NoError(t, r.Map(0, 3*g))
	}()
	var l Leak
	deadline := time.After(10 * time.Second)
	for got := false; !got; {
		runtime.GC()
		select {
		case l = <-leaks:
			got = true
		case <-time.After(10 * time.Millisecond):
		case <-deadline:
			t.Fatal("the leak watch reported no leak")
		}
	}
	assert.True(t, l.Freed, "the mapping is unmapped: %v", l.Err)
	assert.False(t, l.Tracked)
	s := cpu.MemoryStats()
	assert.Equal(t, before.Tracked, s.Tracked, "and uncounted")
	assert.Equal(t, before.Frees+1, s.Frees)
	assert.Equal(t, before.Leaks+1, s.Leaks)
	assert.Equal(t, before.AddressSpace+4*g, s.AddressSpace, "the address space stays reserved")
}

// leakMappings reserves blocks granules of g bytes on d, maps them in one
// mapping, lets touch write them, starts a return check and drops the
// reservation: its mapping is a leak.
//
//go:noinline
func leakMappings(t *testing.T, d Device, g, blocks int64, touch func(b []byte)) *ReturnCheck {
	r, err := d.Reserve((blocks + 1) * g)
	require.NoError(t, err)
	require.NoError(t, r.Map(0, blocks*g))
	if touch != nil {
		touch(r.Bytes(0, blocks*g))
	}
	c, err := d.StartReturnCheck()
	require.NoError(t, err)
	return c
}

// testReturnCheckCountsLeakUnmaps: a mapping that the leak watch unmaps
// (FreeLeaks) while a return check runs counts in the check's Unmapped,
// as an unmap by Reservation.Unmap does: every unmap memtrack makes,
// whichever path makes it, counts. touch, if any, writes the mapping's
// pages, so that they are memory (on the CPU).
func testReturnCheckCountsLeakUnmaps(t *testing.T, d Device, touch func(b []byte)) Return {
	g, err := d.MapGranularity()
	if errors.Is(err, ErrNotSupported) {
		t.Skip(err)
	}
	require.NoError(t, err)
	const blocks = 3
	sink := newLeakSink()
	require.NoError(t, d.Leaks().Enable(LeakWatch{FreeLeaks: true, Handler: func(l Leak) {
		if l.Size == blocks*g {
			sink.handle(l)
		}
	}}))
	t.Cleanup(d.Leaks().Disable)
	c := leakMappings(t, d, g, blocks, touch)
	l := sink.next(t)
	require.True(t, l.Freed, "the leak watch unmapped the mapping: %v", l.Err)
	ret, err := c.End()
	require.NoError(t, err)
	t.Log(ret)
	assert.Equal(t, blocks*g, ret.Unmapped, "the leak watch's unmap")
	assert.Zero(t, ret.Mapped)
	assert.Equal(t, blocks*g, ret.Expected)
	assert.True(t, ret.Returned(), "%v", ret)
	assert.NotContains(t, ret.String(), "more: other memory was freed meanwhile")
	return ret
}

// TestReturnCheckCountsLeakUnmaps: on the CPU, the pages of a leaked
// mapping, written, go back to the OS when the leak watch unmaps it, and
// the return check counts that unmap and sees them go, exactly.
func TestReturnCheckCountsLeakUnmaps(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the exact figure of the reservations' resident pages is Linux's (mincore)")
	}
	ret := testReturnCheckCountsLeakUnmaps(t, freshCPU(t), func(b []byte) { writeFraction(b, 1, 1) })
	require.True(t, ret.PerProcess, "the reservations' resident pages are read")
	assert.Equal(t, ret.Expected, ret.ProcessReturned, "the resident pages unmapped")
}

// writeFraction writes the first num/den of b's pages, making them
// resident.
func writeFraction(b []byte, num, den int) {
	page := os.Getpagesize()
	for i := 0; i < len(b)*num/den; i += page {
		b[i] = 1
	}
}
