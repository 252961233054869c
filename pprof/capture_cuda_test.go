//go:build cuda

package pprof

import (
	"io"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/stretchr/testify/require"
)

// TestWriteProfileDuringCapture writes both profiles of cuda:0 while the
// program captures a CUDA graph in global mode: each is written and the
// program's capture ends with its graph (rendertest.DuringCapture). It
// runs in a process of its own, since using cuda:0 adds it to the used
// devices.
func TestWriteProfileDuringCapture(t *testing.T) {
	if !childtest.InChild(t, "MEMTRACK_PPROF_CHILD") {
		return
	}
	d, _ := rendertest.CUDA0(t)
	require.NoError(t, d.Sites().Enable(16))
	rendertest.DuringCapture(t, d, []rendertest.Rendering{
		{Name: "inuse", Render: func() error { return WriteProfile(io.Discard, d, InUse) }},
		{Name: "peak", Render: func() error { return WriteProfile(io.Discard, d, Peak) }},
	})
}
