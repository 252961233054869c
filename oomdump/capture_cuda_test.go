//go:build cuda

package oomdump

import (
	"testing"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/stretchr/testify/assert"
)

// TestDumpDuringCapture has an allocation on cuda:0 refused by its limit
// while the program captures a CUDA graph in global mode: the dump is
// written and the program's capture ends with its graph
// (rendertest.DuringCapture). It runs in a process of its own, since using
// cuda:0 adds it to the used devices.
func TestDumpDuringCapture(t *testing.T) {
	if !childtest.InChild(t, "MEMTRACK_OOMDUMP_CHILD") {
		return
	}
	d, _ := rendertest.CUDA0(t)
	recordEverything(t, d)
	dir := t.TempDir()
	rendertest.DuringCapture(t, d, []rendertest.Rendering{{Name: "dump", Render: func() error {
		du, err := Install(d, dir, Options{}) // one of its own: a second dump would wait for MinInterval
		if err != nil {
			return err
		}
		defer du.Remove()
		if err := d.SetMemoryLimit(d.MemoryAllocated() + 4096); err != nil {
			return err
		}
		_, err = d.Alloc(1 << 20)
		assert.ErrorIs(t, err, memtrack.ErrOutOfMemory)
		assert.Len(t, du.Dumps(), 1, "a dump written")
		assert.Zero(t, du.Unwritten())
		return d.SetMemoryLimit(0)
	}}})
}
