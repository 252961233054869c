package tracker

import (
	"fmt"
	"sync"
	stdatomic "sync/atomic"
)

// MaxOrdinal is the largest ordinal a [Table] accepts.
const MaxOrdinal = 1<<16 - 1

// Table maps device ordinals to their [Record]s. Looking up a record that
// exists is lock-free (one atomic pointer load and an index); only the first
// use of an ordinal takes a lock, to publish a grown copy of the table.
// The zero Table is empty and ready to use; it must not be copied.
type Table struct {
	mu   sync.Mutex // serialises growth
	recs stdatomic.Pointer[[]*Record]
}

// Record returns the record of ordinal i, creating it on first use. It fails
// for an ordinal outside [0, MaxOrdinal].
func (t *Table) Record(i int) (*Record, error) {
	if r := t.Lookup(i); r != nil {
		return r, nil
	}
	if i < 0 || i > MaxOrdinal {
		return nil, fmt.Errorf("memtrack: ordinal %d outside [0, %d]", i, MaxOrdinal)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var old []*Record
	if p := t.recs.Load(); p != nil {
		old = *p
	}
	if i < len(old) && old[i] != nil {
		return old[i], nil
	}
	grown := make([]*Record, max(len(old), i+1))
	copy(grown, old)
	grown[i] = new(Record)
	t.recs.Store(&grown)
	return grown[i], nil
}

// Lookup returns the record of ordinal i, or nil if it was never created.
func (t *Table) Lookup(i int) *Record {
	p := t.recs.Load()
	if p == nil || uint(i) >= uint(len(*p)) { // i < 0 too
		return nil
	}
	return (*p)[i]
}

// Range calls f for each record in ordinal order, stopping if f returns
// false. Records created while Range runs may or may not be visited.
func (t *Table) Range(f func(ordinal int, r *Record) bool) {
	p := t.recs.Load()
	if p == nil {
		return
	}
	for i, r := range *p {
		if r != nil && !f(i, r) {
			return
		}
	}
}
