package captures

import (
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBounded: a set keeps every capture in progress and the last max
// that ended, so that a program capturing graphs for ever holds a bounded
// record of them; its Outliving keeps the forgotten ones', whose
// allocations may still be live: their bytes, and for a chunk their bytes
// in whole chunks and two chunks more an allocation.
func TestBounded(t *testing.T) {
	const bound = 64
	s := New(bound)
	live := s.AllocNode(1, 1, 10) // in progress throughout, on stream 1
	for id := uint64(2); id < 2+bound+10; id++ {
		s.AllocNode(id, 2, int64(id)) // each ends when the next is seen on stream 2
	}
	s.OnStream(2, State{}) // stream 2 seen no longer capturing
	list := s.List()
	require.Len(t, list, bound+1)
	assert.Equal(t, live.value(), list[0], "the capture in progress stays")
	assert.True(t, list[0].Capturing)
	assert.Equal(t, uint64(2+10), list[1].ID, "the oldest ended ones go")
	assert.Equal(t, uint64(2+bound+9), list[bound].ID)
	assert.False(t, list[bound].Capturing, "the last ended when its stream stopped capturing")
	assert.Len(t, s.byStream, 2)
	assert.Len(t, s.byID, bound+1)
	outliving := int64(10)
	for id := int64(2); id < 2+bound+10; id++ {
		outliving += id
	}
	assert.Equal(t, outliving, s.Outliving(1), "the forgotten captures' allocations may still be live")
	const chunk = 32
	rounded := Pinned(10, 1, chunk, chunk) // the capture in progress
	for id := int64(2 + 10); id < 2+bound+10; id++ {
		rounded += Pinned(id, 1, RoundUp(id, chunk), chunk) // those kept
	}
	var forgotten int64
	for id := int64(2); id < 2+10; id++ {
		forgotten += id
	}
	rounded += RoundUp(forgotten, chunk) + 2*10*chunk // the ten forgotten, at most
	assert.Equal(t, rounded, s.Outliving(chunk), "each kept capture's Pinned; the forgotten ones' bound")
}

// TestPinned: what n allocations of bytes may pin, wherever the driver
// placed them: ceil((s-1)/chunk)+1 chunks for one of s bytes, so at most
// ceil((bytes-n)/chunk) + 2n - 1 chunks for n, and no more than the
// graph's need; the H200's rows among them (chunk 32 MiB: 8 MiB after 30
// MiB freed pinned two chunks, 3 MiB after 30 MiB two, 8 and 8 MiB with
// 30 MiB freed between two).
func TestPinned(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct{ bytes, n, need, chunk, want int64 }{
		{0, 0, 64 * mib, 32 * mib, 0},
		{8 * mib, 1, 64 * mib, 32 * mib, 64 * mib},
		{8 * mib, 1, 32 * mib, 32 * mib, 32 * mib},
		{3 * mib, 1, 64 * mib, 32 * mib, 64 * mib},
		{16 * mib, 2, 64 * mib, 32 * mib, 64 * mib},
		{16 * mib, 2, 1024 * mib, 32 * mib, 128 * mib},
		{32 * mib, 1, 1024 * mib, 32 * mib, 64 * mib},
		{33 * mib, 1, 1024 * mib, 32 * mib, 96 * mib},
		{1, 1, 1024 * mib, 32 * mib, 32 * mib},
		{200, 1, 500, 1, 200}, {60, 2, 100, 0, 60},
	} {
		assert.Equal(t, c.want, Pinned(c.bytes, c.n, c.need, c.chunk), "%d allocations of %d bytes, need %d, chunk %d", c.n, c.bytes, c.need, c.chunk)
	}
}

// TestRoundUp: whole chunks, saturating; a chunk of 0 or 1 rounds nothing.
func TestRoundUp(t *testing.T) {
	for _, c := range []struct{ n, chunk, want int64 }{
		{0, 32, 0}, {1, 32, 32}, {32, 32, 32}, {33, 32, 64}, {100 << 20, 32 << 20, 128 << 20}, {7, 0, 7}, {7, 1, 7}, {-3, 32, -3},
		{math.MaxInt64, 32, math.MaxInt64 / 32 * 32}, {math.MaxInt64 - 5, 1 << 20, math.MaxInt64 / (1 << 20) * (1 << 20)},
	} {
		assert.Equal(t, c.want, RoundUp(c.n, c.chunk), "%d in chunks of %d", c.n, c.chunk)
	}
}

// FuzzCaptures: captures counted from several goroutines at once, one per
// capture (a stream's nodes are captured in its order), against a
// sequential model of each: its nodes, the bytes of its own allocations
// live, and their peak, and whether the driver invalidated it, which the
// set learns by the capture's ID alone: a reading of its stream in an
// invalidated capture, with no ID, changes nothing.
func FuzzCaptures(f *testing.F) {
	f.Add([]byte{0, 5, 1, 7, 0x80, 0, 0, 3, 0x81, 0, 2, 9})
	f.Add([]byte{3, 15, 3, 15, 0x83, 1, 0x83, 0, 3, 2})
	f.Add([]byte{0, 5, 0x40, 1, 1, 7, 0x41, 0, 0x81, 0, 1, 2})
	f.Fuzz(func(t *testing.T, ops []byte) {
		const n = 4
		type model struct {
			allocs, frees, need int64
			live                []int64 // the sizes of its own allocations not freed
			seen, invalidated   bool
		}
		perCapture := make([][][2]byte, n)
		for i := 0; i+1 < len(ops); i += 2 {
			id := int(ops[i]&0x7f) % n
			perCapture[id] = append(perCapture[id], [2]byte{ops[i], ops[i+1]})
		}
		models := make([]model, n)
		s := New(4096)
		var wg sync.WaitGroup
		for id := range n {
			wg.Go(func() {
				m := &models[id]
				stream := uintptr(id + 1)
				for _, op := range perCapture[id] {
					if op[0]&0xc0 == 0x40 {
						if op[1]&1 == 0 {
							s.Invalidated(uint64(id+1), stream) // a node refused in it, read by its ID
							m.seen, m.invalidated = true, true
							continue
						}
						got := s.OnStream(stream, State{Capturing: true, Invalidated: true})
						assert.Equal(t, Capture{Stream: stream, Capturing: true, Invalidated: true}, got)
						continue
					}
					if op[0]&0x80 == 0 || len(m.live) == 0 {
						size := int64(op[1]%16+1) << 20 // memtrack counts no allocation of 0 bytes
						s.AllocNode(uint64(id+1), stream, size)
						m.seen = true
						m.allocs++
						m.live = append(m.live, size)
						var sum int64
						for _, b := range m.live {
							sum += b
						}
						m.need = max(m.need, sum)
						continue
					}
					j := int(op[1]) % len(m.live)
					s.FreeNode(uint64(id+1), stream, m.live[j])
					m.frees++
					m.live = append(m.live[:j], m.live[j+1:]...)
				}
			})
		}
		wg.Wait()
		list := s.List()
		want := []Capture{}
		var outliving, pinned int64 // of the captures not known invalidated
		for id, m := range models {
			if !m.seen {
				continue
			}
			var live int64
			for _, b := range m.live {
				live += b
			}
			if !m.invalidated {
				outliving += live
			}
			want = append(want, Capture{ID: uint64(id + 1), Stream: uintptr(id + 1), Capturing: true, Invalidated: m.invalidated,
				Allocs: m.allocs, Frees: m.frees, PeakBytes: m.need, OutlivingBytes: live, OutlivingAllocs: int64(len(m.live))})
			if !m.invalidated {
				pinned += Pinned(live, int64(len(m.live)), RoundUp(m.need, 3<<20), 3<<20)
			}
		}
		assert.Equal(t, want, list)
		assert.Equal(t, outliving, s.Outliving(1), "the sum of the captures not known invalidated")
		assert.Equal(t, pinned, s.Outliving(3<<20), "each capture's Pinned")
	})
}

// TestInvalidatedWithoutID: the driver gives no ID for an invalidated
// capture (cuStreamGetCaptureInfo), so a reading of a stream whose capture
// is invalidated says so of no record: the stream's last capture may be
// the invalidated one, or may have ended with its graph before another
// began. Read by OnStream, the reading leaves the last capture as it was;
// the capture then reads ended, not invalidated, once the stream is seen
// not capturing.
func TestInvalidatedWithoutID(t *testing.T) {
	s := New(4096)
	s.AllocNode(1, 7, 8)
	before := s.OnStream(7, State{ID: 1, Capturing: true}) // just before it ends, as documented
	require.Equal(t, Capture{ID: 1, Stream: 7, Capturing: true, Allocs: 1, PeakBytes: 8, OutlivingBytes: 8, OutlivingAllocs: 1}, before)

	// It ends with its graph; the next capture on the stream is
	// invalidated before the set sees it, and the stream is read once.
	got := s.OnStream(7, State{Capturing: true, Invalidated: true})
	assert.Equal(t, Capture{Stream: 7, Capturing: true, Invalidated: true}, got,
		"the stream's invalidated capture, which the driver names by no ID")
	assert.Equal(t, []Capture{before}, s.List(), "the record as it was")
	ended := s.OnStream(7, State{})
	want := before
	want.Capturing = false
	assert.Equal(t, want, ended, "ended, not invalidated")
	assert.Equal(t, []Capture{want}, s.List())
	assert.Equal(t, int64(8), s.Outliving(1), "its allocation outlives its launches")
}

// TestListAsksNothing: List reports each capture as the set last saw it,
// asking nothing of the streams (a stream's handle is the program's, who
// may have destroyed it): a capture that ended unseen reads in progress
// until its stream is seen again, not capturing (OnStream) or in another
// capture (a node of it).
func TestListAsksNothing(t *testing.T) {
	s := New(4096)
	s.AllocNode(1, 7, 8)
	s.AllocNode(2, 9, 4)
	inProgress := []Capture{
		{ID: 1, Stream: 7, Capturing: true, Allocs: 1, PeakBytes: 8, OutlivingBytes: 8, OutlivingAllocs: 1},
		{ID: 2, Stream: 9, Capturing: true, Allocs: 1, PeakBytes: 4, OutlivingBytes: 4, OutlivingAllocs: 1},
	}
	assert.Equal(t, inProgress, s.List(), "both as last seen: in progress")
	assert.Equal(t, inProgress, s.List(), "a second List changes nothing")

	s.OnStream(7, State{}) // stream 7 seen not capturing
	s.FreeNode(3, 9, 0)    // stream 9 seen in capture 3
	list := s.List()
	require.Len(t, list, 3)
	assert.False(t, list[0].Capturing, "capture 1 ended: its stream was seen not capturing")
	assert.False(t, list[1].Capturing, "capture 2 ended: its stream was seen in capture 3")
	assert.Equal(t, Capture{ID: 3, Stream: 9, Capturing: true, Frees: 1}, list[2])
}

// TestInvalidatedByID: a capture that the caller learned invalidated by
// its ID (a node the driver refused in it) reads invalidated, and its
// allocations leave the set's Outliving, since its graph never launches;
// nodes counted after stay out of it.
func TestInvalidatedByID(t *testing.T) {
	s := New(4096)
	s.AllocNode(1, 7, 8)
	s.AllocNode(2, 8, 4)
	require.Equal(t, int64(12), s.Outliving(1))
	require.Equal(t, int64(20), s.Outliving(10), "each capture's one allocation in its one chunk")
	s.Invalidated(1, 7)
	assert.Equal(t, int64(4), s.Outliving(1))
	s.AllocNode(1, 7, 16)
	assert.Equal(t, int64(4), s.Outliving(1), "a node of an invalidated capture")
	c := s.OnStream(7, State{ID: 1, Capturing: true})
	assert.Equal(t, Capture{ID: 1, Stream: 7, Capturing: true, Invalidated: true, Allocs: 2, PeakBytes: 24, OutlivingBytes: 24, OutlivingAllocs: 2}, c)
	s.Invalidated(1, 7)
	assert.Equal(t, int64(4), s.Outliving(1), "invalidated once")
}
