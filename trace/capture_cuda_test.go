//go:build cuda

package trace

import (
	"io"
	"testing"

	"github.com/memtrack/memtrack/internal/childtest"
	"github.com/memtrack/memtrack/internal/rendertest"
	"github.com/stretchr/testify/require"
)

// TestWriteDuringCapture snapshots cuda:0's history and writes it while
// the program captures a CUDA graph in global mode: it is written and the
// program's capture ends with its graph (rendertest.DuringCapture). It
// runs in a process of its own, since using cuda:0 adds it to the used
// devices.
func TestWriteDuringCapture(t *testing.T) {
	if !childtest.InChild(t, "MEMTRACK_TRACE_CHILD") {
		return
	}
	d, _ := rendertest.CUDA0(t)
	require.NoError(t, d.History().Enable(1024))
	rendertest.DuringCapture(t, d, []rendertest.Rendering{{Name: "write", Render: func() error {
		h, err := d.History().Snapshot()
		if err != nil {
			return err
		}
		return Write(io.Discard, h)
	}}})
}
