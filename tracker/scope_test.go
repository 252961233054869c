package tracker

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scoped is what the scope tests drive: a Record or a Counter.
type scoped interface {
	Alloc(n int64) error
	Free(n int64) error
	ResetPeak()
	Current() int64
	Peak() int64
	OpenScope() *Scope
}

var scopedKinds = []struct {
	name string
	make func() scoped
}{
	{"Record", func() scoped { return recordScoped{new(Record)} }},
	{"Counter", func() scoped { return new(Counter) }},
}

// recordScoped reads a Record's bytes by the Counter's names.
type recordScoped struct{ *Record }

func (r recordScoped) Current() int64 { return r.Tracked() }
func (r recordScoped) Peak() int64    { return r.PeakTracked() }

func TestScope(t *testing.T) {
	for _, k := range scopedKinds {
		t.Run(k.name, func(t *testing.T) {
			f := k.make()
			require.NoError(t, f.Alloc(100))
			outer := f.OpenScope()
			assert.Equal(t, int64(100), outer.Peak(), "a scope starts at the current figure")
			require.NoError(t, f.Alloc(50))
			require.NoError(t, f.Free(50))
			inner := f.OpenScope()
			assert.Equal(t, int64(100), inner.Peak())
			require.NoError(t, f.Alloc(20))
			f.ResetPeak()
			require.NoError(t, f.Free(20))
			assert.Equal(t, int64(150), outer.Peak(), "ResetPeak moved the outer scope")
			assert.Equal(t, int64(120), inner.Peak())
			assert.Equal(t, int64(120), f.Peak())

			p, err := inner.Close()
			require.NoError(t, err)
			assert.Equal(t, int64(120), p)
			assert.True(t, inner.Closed())
			require.NoError(t, f.Alloc(500))
			assert.Equal(t, int64(120), inner.Peak(), "a closed scope's peak moved")
			assert.Equal(t, int64(600), outer.Peak())

			p, err = inner.Close()
			assert.ErrorIs(t, err, ErrScopeClosed)
			assert.Equal(t, int64(120), p, "a second Close returns the same peak")

			p, err = outer.Close()
			require.NoError(t, err)
			assert.Equal(t, int64(600), p)
			require.NoError(t, f.Free(500))
			require.NoError(t, f.Alloc(1000))
			assert.Equal(t, int64(600), outer.Peak())
		})
	}
}

// TestScopeSetEmptiesWhenAllClose: the allocation path's check for open
// scopes is a nil pointer again once the last scope closes.
func TestScopeSetEmptiesWhenAllClose(t *testing.T) {
	var r Record
	var c Counter
	a, b := r.OpenScope(), r.OpenScope()
	ca := c.OpenScope()
	assert.True(t, r.HasOpenScopes())
	assert.True(t, c.HasOpenScopes())
	_, _ = a.Close()
	assert.True(t, r.HasOpenScopes())
	_, _ = b.Close()
	_, _ = ca.Close()
	assert.False(t, r.HasOpenScopes())
	assert.False(t, c.HasOpenScopes())
}

// TestScopeZeroAllocs: with scopes open, Alloc and Free allocate nothing on
// the heap; only opening and closing a scope does.
func TestScopeZeroAllocs(t *testing.T) {
	var c Counter
	var r Record
	s1, s2 := c.OpenScope(), r.OpenScope()
	defer s1.Close()
	defer s2.Close()
	var n int64
	for name, f := range map[string]func(){
		"Counter.Alloc+Free": func() { _ = c.Alloc(64); _ = c.Free(64) },
		"Counter.rising":     func() { n++; _ = c.Alloc(n) },
		"Record.Alloc+Free":  func() { _ = r.Alloc(64); _ = r.Free(64) },
		"Scope.Peak":         func() { _ = s1.Peak() + s2.Peak() },
	} {
		assert.Zero(t, testing.AllocsPerRun(1000, f), name)
	}
}

// TestScopeConcurrent opens, reads and closes scopes from many goroutines
// while others allocate and free, with ResetPeak running throughout. The
// workers meet at barriers: in each round every worker holds its block at
// once (the figure is then exactly the sum of the blocks, the most it can
// ever be), so a scope open across the whole run, and a scope opened while
// all hold, both have exactly that peak; scopes opened and closed at random
// by another goroutine are never above it.
func TestScopeConcurrent(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 30
	}
	for _, k := range scopedKinds {
		t.Run(k.name, func(t *testing.T) {
			f := k.make()
			const workers = 4
			blocks := [workers]int64{1 << 10, 3 << 10, 5 << 10, 7 << 10}
			var sum int64
			for _, b := range blocks {
				sum += b
			}
			whole := f.OpenScope()
			var held, freed sync.WaitGroup // barriers of one round
			stop := make(chan struct{})
			var bg sync.WaitGroup
			bg.Add(2)
			var over []string
			go func() { // random scopes, and resets
				defer bg.Done()
				var open []*Scope
				for i := 0; ; i++ {
					select {
					case <-stop:
						for _, s := range open {
							_, _ = s.Close()
						}
						return
					default:
					}
					if len(open) < 8 && i%3 != 2 {
						open = append(open, f.OpenScope())
					} else if len(open) > 0 {
						j := i % len(open)
						if p, _ := open[j].Close(); p > sum {
							over = append(over, fmt.Sprintf("random scope %d", p))
						}
						open = append(open[:j], open[j+1:]...)
					}
					f.ResetPeak()
				}
			}()
			go func() { // readers of the whole-run scope
				defer bg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					if p := whole.Peak(); p > sum {
						over = append(over, fmt.Sprintf("whole-run scope read %d", p))
					}
				}
			}()
			for r := range rounds {
				held.Add(workers)
				freed.Add(workers)
				var inner *Scope
				var opened sync.WaitGroup
				opened.Add(1)
				var wg sync.WaitGroup
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						// The block in pieces, so that the figure passes
						// through many values on the way.
						rng := rand.New(rand.NewPCG(uint64(r), uint64(w)))
						var pieces []int64
						for left := blocks[w]; left > 0; {
							p := min(left, 1+rng.Int64N(1<<10))
							assert.NoError(t, f.Alloc(p))
							pieces = append(pieces, p)
							left -= p
						}
						held.Done()
						held.Wait()
						if w == 0 {
							inner = f.OpenScope()
							opened.Done()
						}
						opened.Wait()
						for _, p := range pieces {
							assert.NoError(t, f.Free(p))
						}
						freed.Done()
						freed.Wait()
					}()
				}
				wg.Wait()
				p, err := inner.Close()
				require.NoError(t, err)
				require.Equal(t, sum, p, "round %d: a scope opened while every block was held", r)
				require.Equal(t, sum, whole.Peak(), "round %d: the whole-run scope", r)
			}
			close(stop)
			bg.Wait()
			p, err := whole.Close()
			require.NoError(t, err)
			assert.Equal(t, sum, p)
			assert.Empty(t, over, "scopes above the most the figure ever held")
			assert.Zero(t, f.Current())
		})
	}
}

// FuzzScope drives a Record and a Counter with the same operations, peak
// scopes among them, and checks every figure and every scope's peak after
// each step against a sequential model. As in FuzzCounter, a step whose
// code has its top bit set runs a refused Free on another goroutine
// throughout, whose add and take-back move the figure for an instant (and
// must move no scope's peak).
func FuzzScope(f *testing.F) {
	enc := encodeOps
	f.Add(enc(op{0, 100}, op{3, 0}, op{0, 50}, op{1, 120}, op{3, 0}, op{2, 0}, op{0, 30}, op{4, 0}, op{5, 1}, op{4, 1}))
	f.Add(enc(op{3, 0}, op{128, 500}, op{129, 300}, op{4, 0}, op{132, 0}, op{3, 0}, op{130, 0}, op{131, 0}))
	f.Add(enc(op{0, 7 << 60}, op{3, 0}, op{1, -1}, op{0, 0}, op{5, 0}, op{4, 3}, op{4, 0}))
	f.Add(enc(op{3, 0}, op{6, 400}, op{1, 100}, op{3, 0}, op{6, 50}, op{134, 7 << 60}, op{4, 1}, op{6, -3}))
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Record
		var c Counter
		type mscope struct {
			rs, cs *Scope
			peak   int64
			closed bool
		}
		var cur, peak, live int64
		var scopes []*mscope
		grow := func(n int64) { // the model of a successful allocation
			cur += n
			live++
			peak = max(peak, cur)
			for _, s := range scopes {
				if !s.closed {
					s.peak = max(s.peak, cur)
				}
			}
		}
		for i, o := range decodeOps(data) {
			n := operand(o.n)
			wait := func() (int, int) { return 0, 0 }
			if o.code >= 128 {
				x := refusedFree(cur, n)
				stopR := concurrently(func() error { return r.Free(x) })
				stopC := concurrently(func() error { return c.Free(x) })
				wait = func() (int, int) {
					a, b := stopR()
					x, y := stopC()
					return a + x, b + y
				}
			}
			switch code := o.code & 127 % 7; code {
			case 0:
				ok := n > 0 && n <= MaxBytes-cur
				er := r.Alloc(n)
				// The counter holds more than a record: past the record's
				// capacity it is refused by a limit at that capacity.
				var ec error
				if n <= MaxBytes-cur {
					ec = c.Alloc(n)
				} else {
					ec = c.AllocWithin(n, MaxBytes)
				}
				require.Equal(t, ok, er == nil, "step %d: Record.Alloc(%d) on %d: %v", i, n, cur, er)
				require.Equal(t, ok, ec == nil, "step %d: Counter.Alloc(%d) on %d: %v", i, n, cur, ec)
				if ok {
					grow(n)
				}
			case 6:
				// The counter's AllocWithin, within a limit that is the
				// record's capacity or, if lower, just enough.
				ok := n > 0 && n <= MaxBytes-cur
				er := r.Alloc(n)
				ec := c.AllocWithin(n, min(cur+max(n, 0), MaxBytes))
				require.Equal(t, ok, er == nil, "step %d: Record.Alloc(%d) on %d: %v", i, n, cur, er)
				require.Equal(t, ok, ec == nil, "step %d: Counter.AllocWithin(%d) on %d: %v", i, n, cur, ec)
				if ok {
					grow(n)
				}
			case 1:
				// A record refuses a free with no live buffer; the
				// counter, which counts no buffers, is then left alone.
				ok := n > 0 && n <= cur && live > 0
				er := r.Free(n)
				require.Equal(t, ok, er == nil, "step %d: Record.Free(%d) on %d, %d live: %v", i, n, cur, live, er)
				if live > 0 {
					ec := c.Free(n)
					require.Equal(t, ok, ec == nil, "step %d: Counter.Free(%d) on %d: %v", i, n, cur, ec)
				}
				if ok {
					cur -= n
					live--
				}
			case 2:
				r.ResetPeak()
				c.ResetPeak()
				peak = cur
			case 3:
				scopes = append(scopes, &mscope{rs: r.OpenScope(), cs: c.OpenScope(), peak: cur})
			case 4, 5:
				// Close (4) or a second close of a closed one, which must
				// change nothing (5 closes whichever is picked).
				if len(scopes) == 0 {
					break
				}
				s := scopes[int(uint64(o.n)%uint64(len(scopes)))]
				pr, er := s.rs.Close()
				pc, ec := s.cs.Close()
				if s.closed {
					require.ErrorIs(t, er, ErrScopeClosed, "step %d", i)
					require.ErrorIs(t, ec, ErrScopeClosed, "step %d", i)
				} else {
					require.NoError(t, er, "step %d", i)
					require.NoError(t, ec, "step %d", i)
				}
				s.closed = true
				require.Equal(t, s.peak, pr, "step %d: Record scope Close", i)
				require.Equal(t, s.peak, pc, "step %d: Counter scope Close", i)
			}
			_, ok := wait()
			require.Zero(t, ok, "step %d: a concurrent refused Free succeeded", i)
			require.Equal(t, cur, r.Tracked(), "step %d", i)
			require.Equal(t, cur, c.Current(), "step %d", i)
			require.Equal(t, peak, r.PeakTracked(), "step %d: Record peak", i)
			require.Equal(t, peak, c.Peak(), "step %d: Counter peak", i)
			open := 0
			for j, s := range scopes {
				require.Equal(t, s.peak, s.rs.Peak(), "step %d: Record scope %d", i, j)
				require.Equal(t, s.peak, s.cs.Peak(), "step %d: Counter scope %d", i, j)
				if !s.closed {
					open++
				}
			}
			require.Equal(t, open > 0, r.HasOpenScopes(), "step %d", i)
			require.Equal(t, open > 0, c.HasOpenScopes(), "step %d", i)
		}
	})
}
