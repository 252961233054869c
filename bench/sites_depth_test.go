package bench

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack"
)

// TestSitesBenchmarkStackIsDeep checks that BenchmarkSitesAllocFree
// allocates from a stack deeper than its deepest site: a site recorded at
// depth 32 from atDepth(stackDepth) keeps 32 frames, so that depth8 and
// depth32 walk different lengths of stack.
func TestSitesBenchmarkStackIsDeep(t *testing.T) {
	d := memtrack.CPU()
	require.NoError(t, d.Sites().SetRate(1))
	defer d.Sites().SetRate(0)
	require.NoError(t, d.Sites().Enable(32))
	defer d.Sites().Disable()
	var buf *memtrack.Buffer
	var err error
	atDepth(stackDepth, func() { buf, err = d.Alloc(64) })
	require.NoError(t, err)
	defer buf.Free()
	snap, err := d.Sites().Snapshot()
	require.NoError(t, err)
	require.NotEmpty(t, snap.Sites)
	assert.Len(t, snap.Sites[0].Stack, 32)
}
