package memtrack

import (
	"sync"

	"go.uber.org/atomic"
)

// recorders publishes the optional recorders of one kind's devices by
// ordinal: the allocation sites (sites.go) and the memory history
// (history.go). While no device of the kind records, the published slice
// is nil, so that the allocation path pays one atomic load and a branch.
type recorders[T any] struct {
	mu   sync.Mutex // serialises changes
	recs atomic.Pointer[[]*T]
}

// lookup returns the recorder of ordinal i, or nil if it records nothing.
func (t *recorders[T]) lookup(i int) *T {
	p := t.recs.Load()
	if p == nil || i >= len(*p) {
		return nil
	}
	return (*p)[i]
}

// update replaces the recorder of ordinal i, under the lock, by what f
// returns for the one it has (nil if none); nil removes it. When the last
// recorder of the kind goes, the published slice is nil again.
func (t *recorders[T]) update(i int, f func(old *T) *T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var old []*T
	if p := t.recs.Load(); p != nil {
		old = *p
	}
	var cur *T
	if i < len(old) {
		cur = old[i]
	}
	next := f(cur)
	if next == cur {
		return
	}
	recs := make([]*T, max(len(old), i+1))
	copy(recs, old)
	recs[i] = next
	for _, r := range recs {
		if r != nil {
			t.recs.Store(&recs)
			return
		}
	}
	t.recs.Store(nil)
}
