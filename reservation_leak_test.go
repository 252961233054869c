package memtrack

import (
	"errors"
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
