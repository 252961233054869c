package slots

// Table holds entries of type *T in numbered slots. The zero Table is
// empty and ready to use.
type Table[T any] struct {
	slots []slot[T] // slots[0] is never used
	free  []uint32  // slots to reuse
}

// slot is one slot: the entry and the address of the object it is for.
type slot[T any] struct {
	v     *T
	owner uintptr
}

// Put stores v, the entry of the object at owner, in a free slot and
// returns the slot's number, never 0.
func (t *Table[T]) Put(v *T, owner uintptr) uint32 {
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		t.slots[i] = slot[T]{v, owner}
		return i
	}
	if len(t.slots) == 0 {
		t.slots = append(t.slots, slot[T]{})
	}
	t.slots = append(t.slots, slot[T]{v, owner})
	return uint32(len(t.slots) - 1)
}

// At returns the entry in slot i and the address of its object, or nil and
// 0 for a slot that holds none (0, past the end, or free).
func (t *Table[T]) At(i uint32) (v *T, owner uintptr) {
	if int(i) < len(t.slots) {
		s := t.slots[i]
		return s.v, s.owner
	}
	return nil, 0
}

// Free empties slot i, which then goes to a later Put.
func (t *Table[T]) Free(i uint32) {
	t.slots[i] = slot[T]{}
	t.free = append(t.free, i)
}

// Keep replaces the entry of slot i by v for good: the slot keeps its
// owner's address and is never reused.
func (t *Table[T]) Keep(i uint32, v *T) { t.slots[i].v = v }

// Each calls f with every entry held, in the order of the slots.
func (t *Table[T]) Each(f func(v *T)) {
	for _, s := range t.slots {
		if s.v != nil {
			f(s.v)
		}
	}
}
