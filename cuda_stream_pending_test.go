//go:build cuda

package memtrack

import (
	"fmt"
	"sync"
	"testing"

	"go.uber.org/atomic"

	"github.com/memtrack/memtrack/internal/cudadrv"
	"github.com/memtrack/memtrack/internal/cudatest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The frees that wait for their streams: each stream's in its order, a
// reading asking each stream once (internal/held); an allocation on a
// stream takes over the frees pending there, as the driver's pool does. A stream held back
// (cudatest.HoldStream: a host function that waits) makes the frees enqueued
// behind it certainly unexecuted, and a synchronization makes those before
// it certainly executed, so that the figures can be checked exactly.

// TestCUDAPendingFreesConcurrent: goroutines allocate and free in stream
// order at once, their events numbered in whatever order they reach the
// stream, while others read the figures; halfway, the streams are
// synchronized and one is held back. Where the buffers are allocated on
// another stream than the one they are freed on, no allocation takes a
// free over: at every reading, Held counts at least the frees returned
// behind the hold (none leaves before its stream has run it); once the
// writers are done, exactly those, and after the hold is released, none.
// With the legacy default stream held, half the writers name it NULL and
// half CU_STREAM_LEGACY: one stream, whose frees a reading asks about
// together. Where each buffer is allocated on the stream it is freed on,
// allocations take the frees before them over: Held counts at least one
// buffer behind the hold, is never below the pool's used bytes (on the
// fake, which rounds nothing), never above the frees behind the hold, and
// exact once the hold is released and the streams synchronized.
func TestCUDAPendingFreesConcurrent(t *testing.T) {
	d := cudaDevices(t, 1)[0]
	if _, err := d.Pool().Stats(); err != nil {
		t.Skip(err)
	}
	const workers, readers, pairs, size = 4, 2, 64, 1 << 12
	own, other, third, legacy := newStream(t, d), newStream(t, d), newStream(t, d), DefaultStream
	_, ctx, err := cudaDeviceOf(d.Ordinal(), "test")
	require.NoError(t, err)
	for _, c := range []struct {
		name    string
		held    Stream
		streams []Stream // the writers' streams to free on, in turn; the held one and others that run free
		allocOn *Stream  // where the buffers are allocated; nil for the stream each is freed on
	}{
		{"a stream of its own, beside another, allocations on a third", own, []Stream{own, other}, &third},
		{"the legacy default stream, by both its handles, allocations on a stream of its own", DefaultStream, []Stream{DefaultStream, Stream(cudadrv.StreamLegacy)}, &own},
		{"a stream of its own, beside another, allocations taking frees over", own, []Stream{own, other}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			quietSide(t, d)
			base, basePool := d.MemoryStats(), poolStats(t, d)
			takeOver := c.allocOn == nil
			isHeld := func(s Stream) bool { return keyOf(s) == keyOf(c.held) }
			var behind atomic.Int64 // frees returned on the held stream behind the hold
			holding := false
			phase := func() {
				var start, writers, reading sync.WaitGroup
				start.Add(1)
				stop := make(chan struct{})
				for range readers {
					reading.Add(1)
					go func() {
						defer reading.Done()
						start.Wait()
						for {
							select {
							case <-stop:
								return
							default:
							}
							least := behind.Load() * size
							if takeOver {
								least = min(least, size) // the newest free behind the hold, or the buffer that took it over
							}
							// Held and Tracked are two counters, which a
							// reading beside allocations does not take at
							// one instant: only Held is checked here.
							assert.GreaterOrEqual(t, d.MemoryStats().Held, base.Held+least, "a free behind the hold left Held")
						}
					}()
				}
				for w := range workers {
					writers.Add(1)
					go func() {
						defer writers.Done()
						start.Wait()
						for i := range pairs {
							s := c.streams[(w+i)%len(c.streams)]
							on := s
							if !takeOver {
								on = *c.allocOn
							}
							b, err := d.AllocAsync(size, on)
							if !assert.NoError(t, err) {
								return
							}
							if on != s && keyOf(s) != keyOf(legacy) {
								// The free on s ordered after the
								// allocation: its stream synchronized. A
								// free on the legacy stream is ordered by
								// the legacy stream's implicit
								// synchronization with the blocking
								// streams, and needs none: with the legacy
								// stream held, the allocating stream waits
								// for it (on a GPU; the fake runs it), and
								// a synchronization would never return.
								var r cudadrv.Result
								if !assert.Equal(t, cudadrv.Success, cudatest.InContext(uintptr(ctx), func() { r = cudatest.StreamSynchronize(uintptr(on)) })) ||
									!assert.Equal(t, cudadrv.Success, r) {
									return
								}
							}
							if !assert.NoError(t, b.FreeAsync(s)) { // ordered after the allocation: the same stream, or the legacy one's implicit order
								return
							}
							if holding && isHeld(s) {
								behind.Add(1)
							}
						}
					}()
				}
				start.Done()
				writers.Wait()
				close(stop)
				reading.Wait()
			}

			phase()
			for _, s := range c.streams {
				syncStream(t, d, s) // every free of the first phase executed
			}
			require.Equal(t, base.Held, d.MemoryStats().Held, "every free of the first phase executed and uncounted")
			defer cudatest.ReleaseStreams() // where the test stops before it does
			inContext(t, d, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(c.held))) })
			holding = true
			phase()
			for _, s := range c.streams {
				if !isHeld(s) {
					syncStream(t, d, s)
				}
			}
			n := behind.Load()
			require.Positive(t, n)
			st := d.MemoryStats()
			assert.Equal(t, base.Tracked, st.Tracked)
			if takeOver {
				assert.GreaterOrEqual(t, st.Held, base.Held+size, "the newest free behind the hold")
				assert.LessOrEqual(t, st.Held, base.Held+n*size, "no more than the frees behind the hold")
				if onFake() {
					assert.GreaterOrEqual(t, st.Held-base.Held, poolStats(t, d).PoolUsed-basePool.PoolUsed, "below what the pool holds")
				}
			} else {
				assert.Equal(t, base.Held+n*size, st.Held, "Held counts the frees behind the hold, and no other")
			}
			if q, counted := readingQueries(t, d); counted {
				assert.NotZero(t, q, "the frees behind the hold are pending: a reading asks about them")
			}

			cudatest.ReleaseStreams()
			for _, s := range c.streams {
				syncStream(t, d, s)
			}
			st = d.MemoryStats()
			assert.Equal(t, base.Held, st.Held, "every free executed and counted")
			if q, counted := readingQueries(t, d); counted {
				assert.Zero(t, q, "no free pending")
			}
		})
	}
}

// FuzzCUDAPendingFrees runs stream-ordered allocations and frees on two
// streams, each synchronized or held back at times, against a sequential
// model that knows of each free whether its stream has certainly run it
// (synchronized since), certainly not (enqueued behind a hold), or may have,
// and what allocations on its stream took over of it (the newest frees
// first: those behind a hold before those before it).
// At each reading, Held is at least the live bytes and the frees certainly
// not run, and at most that and the frees that may have run; on the fake,
// Held is at least the pool's used bytes read after it. A free certainly run
// is never counted, one behind a hold always is, whatever mix of both a
// stream's pending frees hold. Each byte is an operation: its low three
// bits the kind, the next the stream, the rest the size.
//
//	go test -tags cuda -run '^$' -fuzz FuzzCUDAPendingFrees -fuzztime 60s
func FuzzCUDAPendingFrees(f *testing.F) {
	// Two frees pending on one stream, the first executed, the second
	// behind a hold: the reading must keep the second alone.
	f.Add([]byte{0x40, 0x00, 0x02, 0x04, 0x03, 0x07, 0x06, 0x07})
	f.Add([]byte{0x48, 0x08, 0x00, 0x0a, 0x02, 0x0c, 0x0b, 0x03, 0x07, 0x05, 0x07, 0x06, 0x07})
	f.Add([]byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f})
	d, err := CUDA(0)
	if err != nil {
		f.Skip(err)
	}
	if _, err := d.Pool().Stats(); err != nil {
		f.Skip(err)
	}
	streams := []Stream{newStream(f, d), newStream(f, d)}
	f.Fuzz(func(t *testing.T, ops []byte) {
		type model struct {
			held            bool
			certain, maybes int64 // bytes freed on the stream: behind its hold; since its last synchronization, before any hold
		}
		var m [2]model
		release := func() {
			cudatest.ReleaseStreams()
			for i, s := range streams {
				syncStream(t, d, s)
				m[i] = model{}
			}
		}
		release()
		defer release()
		base := d.MemoryStats()
		basePool := poolStats(t, d).PoolUsed
		type live struct {
			b      *Buffer
			stream int
		}
		var bufs []live
		var tracked int64
		free := func(k int) {
			l := bufs[k]
			require.NoError(t, l.b.FreeAsync(streams[l.stream]))
			tracked -= l.b.Size()
			if m[l.stream].held {
				m[l.stream].certain += l.b.Size()
			} else {
				m[l.stream].maybes += l.b.Size()
			}
			bufs = append(bufs[:k], bufs[k+1:]...)
		}
		read := func(msg string) {
			t.Helper()
			st := d.MemoryStats()
			least := base.Held + tracked + m[0].certain + m[1].certain
			msg = fmt.Sprintf("%s: %+v", msg, m)
			require.Equal(t, base.Tracked+tracked, st.Tracked, msg)
			require.GreaterOrEqual(t, st.Held, least, msg+": a free left Held before its stream ran it")
			require.LessOrEqual(t, st.Held, least+m[0].maybes+m[1].maybes, msg+": a free its stream ran is still counted")
			if onFake() {
				require.GreaterOrEqual(t, st.Held-base.Held, poolStats(t, d).PoolUsed-basePool, msg)
			}
		}
		for i, op := range ops {
			s := int(op>>3) & 1
			switch op & 7 {
			case 0, 1: // allocate on s: it takes over the frees pending there, the newest first
				size := int64(op>>4%5+1) << 12
				b, err := d.AllocAsync(size, streams[s])
				require.NoError(t, err)
				bufs = append(bufs, live{b, s})
				tracked += size
				taken := min(size, m[s].certain)
				m[s].certain -= taken
				m[s].maybes = max(0, m[s].maybes-(size-taken))
			case 2: // free the oldest, on its stream
				if len(bufs) > 0 {
					free(0)
				}
			case 3: // free the newest, on its stream
				if len(bufs) > 0 {
					free(len(bufs) - 1)
				}
			case 4: // synchronize a stream and hold it back
				if !m[s].held {
					syncStream(t, d, streams[s])
					inContext(t, d, func() { require.Equal(t, cudadrv.Success, cudatest.HoldStream(uintptr(streams[s]))) })
					m[s] = model{held: true}
				}
			case 5: // synchronize a stream
				if !m[s].held {
					syncStream(t, d, streams[s])
					m[s].maybes = 0
				}
			case 6: // release both streams and synchronize them
				release()
			case 7:
				read(fmt.Sprintf("step %d (op %#x)", i, op))
			}
		}
		read("at the end")
		release()
		st := d.MemoryStats()
		assert.Equal(t, base.Held+tracked, st.Held, "after the synchronization, every free executed is uncounted")
		for len(bufs) > 0 {
			free(0)
		}
	})
}
