package memtrack

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The states of a buffer in FuzzLeakWatch's model.
const (
	modelLive         = iota
	modelFreed        // freed by Free
	modelLeakFreed    // found leaked and freed by the watch
	modelLeakKept     // found leaked, its memory kept
	modelOldCollected // collected after the watch that watched it went off
)

type modelBuffer struct {
	b       *Buffer
	size    int64
	watched bool
	epoch   int
	state   int
}

// FuzzLeakWatch runs allocations, frees, collections (the cleanup called
// as the runtime would for an unreachable buffer, which no Free reaches
// after), and watching switched on, off and reconfigured, against a
// sequential model of what each must do to the figures: every free and
// every leak counted once, whatever the order.
func FuzzLeakWatch(f *testing.F) {
	f.Add([]byte{3, 1, 0, 10, 2, 0, 1, 0})
	f.Add([]byte{3, 0, 0, 5, 0, 6, 3, 0, 2, 0, 1, 0, 1, 1})
	f.Add([]byte{0, 1, 3, 1, 0, 2, 4, 0, 2, 1, 3, 0, 3, 1, 0, 3, 2, 2, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		fb, ds := fakeCUDA(t, 1, 1<<40)
		d := ds[0]
		var (
			bufs               []*modelBuffer
			on, free           bool
			epoch              int
			current, frees     int64
			freedBytes         int64
			leaks, leakedBytes int64
		)
		handler := func(Leak) {}
		for i := 0; i+1 < len(data); i += 2 {
			op, arg := data[i]%5, int(data[i+1])
			pick := func() *modelBuffer {
				if len(bufs) == 0 {
					return nil
				}
				return bufs[arg%len(bufs)]
			}
			switch op {
			case 0: // alloc
				size := int64(arg + 1)
				b, err := d.Alloc(size)
				require.NoError(t, err)
				bufs = append(bufs, &modelBuffer{b: b, size: size, watched: on, epoch: epoch})
				current += size
				assert.Equal(t, on, b.entry != 0)
			case 1: // Free
				m := pick()
				if m == nil || m.state != modelLive && m.state != modelFreed {
					continue // collected: unreachable, which no program frees
				}
				err := m.b.Free()
				if m.state == modelFreed {
					require.ErrorIs(t, err, ErrDoubleFree)
					break
				}
				require.NoError(t, err)
				m.state = modelFreed
				current -= m.size
				frees++
				freedBytes += m.size
			case 2: // the collector finds the buffer unreachable
				m := pick()
				if m == nil || !m.watched || m.state != modelLive {
					continue
				}
				w := tableOf(m.b.kind).claimerOf(int(m.b.ordinal)).(*deviceLeaks).ownEntry(m.b.entry, m.b.owner())
				require.NotNil(t, w)
				collected(w)
				switch {
				case m.epoch != epoch:
					m.state = modelOldCollected
				case free:
					m.state = modelLeakFreed
					leaks++
					leakedBytes += m.size
					current -= m.size
					frees++
					freedBytes += m.size
				default:
					m.state = modelLeakKept
					leaks++
					leakedBytes += m.size
				}
			case 3: // watching switched on or off
				if on {
					d.Leaks().Disable()
					on = false
					epoch++
				} else {
					free = arg&1 != 0
					require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: handler, FreeLeaks: free}))
					on = true
				}
			case 4: // reconfigured while on
				if on {
					free = arg&1 != 0
					require.NoError(t, d.Leaks().Enable(LeakWatch{Handler: handler, FreeLeaks: free}))
				}
			}
			s := d.MemoryStats()
			require.Equal(t, current, s.Tracked, "step %d", i/2)
			require.Equal(t, frees, s.Frees, "step %d", i/2)
			require.Equal(t, freedBytes, s.FreedBytes, "step %d", i/2)
			require.Equal(t, leaks, s.Leaks, "step %d", i/2)
			require.Equal(t, leakedBytes, s.LeakedBytes, "step %d", i/2)
			used, _, _ := fb.state(0)
			require.Equal(t, current, used, "step %d: the backend holds what is counted", i/2)
			entries := 0
			for _, m := range bufs {
				if m.watched && m.state == modelLive {
					entries++
				}
			}
			require.Equal(t, entries, liveEntries(d), "step %d", i/2)
		}
		// Free what is live, so that no cleanup of this run acts later.
		for _, m := range bufs {
			if m.state == modelLive {
				require.NoError(t, m.b.Free())
			}
			if m.state == modelLeakKept || m.state == modelOldCollected {
				leftOnPurpose(d, m.size) // collected, which no free reaches
			}
		}
		d.Leaks().Disable()
	})
}
