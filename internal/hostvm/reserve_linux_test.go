package hostvm

import (
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/memtrack/memtrack/internal/hostmem"
)

// bytesAt returns the n bytes of r at offset, to write and read committed
// pages.
func bytesAt(r *Reservation, offset, n int64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(&r.os.mem[offset])), n)
}

// notResidentIn returns the bytes of [offset, offset+n) of r (whole
// pages) that are not resident, as mincore(2) reports them: the lowest
// bit of each page's byte.
func notResidentIn(t *testing.T, r *Reservation, offset, n int64) int64 {
	t.Helper()
	page := PageSize()
	vec := make([]byte, n/page)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&r.os.mem[offset])), uintptr(n), uintptr(unsafe.Pointer(&vec[0])))
	require.Zero(t, e, "mincore: %v", e)
	var missing int64
	for _, v := range vec {
		if v&1 == 0 {
			missing += page
		}
	}
	return missing
}

// TestReservationResidency reserves 256 MiB, which the process's resident
// set does not see; commits and writes 64 MiB of it, which it does, page
// by page (mincore) and in its resident figure (ProcessUsed); then
// decommits them, which gives the pages back: none of them is resident,
// and the figure falls back. Committed again, they read zero: the old
// pages are gone.
func TestReservationResidency(t *testing.T) {
	const size, part, at = 256 << 20, 64 << 20, 32 << 20
	page := PageSize()
	before, err := hostmem.ProcessUsed()
	require.NoError(t, err)
	r, err := Reserve(size)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Release()) }()
	assert.Equal(t, int64(size), notResidentIn(t, r, 0, size), "a reservation holds no memory")
	reserved, err := hostmem.ProcessUsed()
	require.NoError(t, err)
	assert.Less(t, reserved-before, int64(part/8), "reserving took memory")

	require.NoError(t, r.Commit(at, part))
	b := bytesAt(r, at, part)
	for i := int64(0); i < part; i += page {
		b[i] = 0xa5
	}
	assert.Zero(t, notResidentIn(t, r, at, part), "every page written is resident")
	assert.Equal(t, int64(size-part), notResidentIn(t, r, 0, size), "and no other")
	written, err := hostmem.ProcessUsed()
	require.NoError(t, err)
	assert.Greater(t, written-reserved, int64(part*8/10), "the resident figure rose by %d for %d bytes written", written-reserved, part)

	require.NoError(t, r.Decommit(at, part))
	assert.Equal(t, int64(size), notResidentIn(t, r, 0, size), "no page is resident after the decommit")
	after, err := hostmem.ProcessUsed()
	require.NoError(t, err)
	assert.Less(t, after-reserved, int64(part/4), "the resident figure stayed %d above where it was before the commit", after-reserved)

	require.NoError(t, r.Commit(at, part))
	for i := int64(0); i < part; i += page {
		if b[i] != 0 {
			t.Fatalf("byte %d reads %#x after a decommit and a commit: the pages were not given back", i, b[i])
		}
	}
}

// A decommit of part of what was committed gives back that part only.
func TestPartialDecommit(t *testing.T) {
	page := PageSize()
	r, err := Reserve(16 * page)
	require.NoError(t, err)
	defer func() { require.NoError(t, r.Release()) }()
	require.NoError(t, r.Commit(0, 16*page))
	b := bytesAt(r, 0, 16*page)
	for i := range b {
		b[i] = 1
	}
	require.NoError(t, r.Decommit(4*page, 4*page))
	assert.Equal(t, 4*page, notResidentIn(t, r, 0, 16*page))
	assert.Equal(t, byte(1), b[3*page], "before the range")
	assert.Equal(t, byte(1), b[8*page], "after it")
}

func TestReservationRefusals(t *testing.T) {
	page := PageSize()
	for _, size := range []int64{0, -page, page + 1} {
		_, err := Reserve(size)
		assert.ErrorIs(t, err, ErrBadRange, "Reserve(%d)", size)
	}
	r, err := Reserve(8 * page)
	require.NoError(t, err)
	for _, tc := range []struct{ offset, size int64 }{
		{0, 0}, {0, -page}, {-page, page}, {1, page}, {0, page + 1}, {7 * page, 2 * page}, {8 * page, page}, {page, 1 << 62},
	} {
		err := r.Commit(tc.offset, tc.size)
		assert.ErrorIs(t, err, ErrBadRange, "Commit(%d, %d)", tc.offset, tc.size)
		assert.ErrorIs(t, r.Decommit(tc.offset, tc.size), ErrBadRange, "Decommit(%d, %d)", tc.offset, tc.size)
	}
	assert.Contains(t, r.Commit(1, page).Error(), fmt.Sprintf("commit of %d bytes at offset 1 of a reservation of %d bytes", page, 8*page))
	assert.Equal(t, 8*page, notResidentIn(t, r, 0, 8*page))
	require.NoError(t, r.Commit(7*page, page), "the last page")
	require.NoError(t, r.Release())
	assert.ErrorIs(t, r.Release(), ErrReleased)
	assert.ErrorIs(t, r.Commit(0, page), ErrReleased)
	assert.ErrorIs(t, r.Decommit(0, page), ErrReleased)
}

func TestGranularities(t *testing.T) {
	assert.Equal(t, int64(os.Getpagesize()), PageSize())
	assert.Equal(t, PageSize(), ReserveGranularity())
	r, err := Reserve(ReserveGranularity())
	require.NoError(t, err)
	assert.Zero(t, r.Base()%uintptr(PageSize()), "the base is page-aligned")
	assert.Equal(t, ReserveGranularity(), r.Size())
	require.NoError(t, r.Release())
}
