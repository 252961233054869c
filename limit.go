package memtrack

import "fmt"

// SetMemoryLimit caps the bytes the device's live buffers may hold: an Alloc
// that would pass it fails with an [*OutOfMemoryError]. Zero removes the
// limit; a negative limit is an error. Buffers already allocated are kept
// even if they exceed a new limit.
func (d Device) SetMemoryLimit(limit int64) error {
	if limit < 0 {
		return fmt.Errorf("%w: memory limit %d on %v is negative (0 removes the limit)", ErrInvalidSize, limit, d)
	}
	_, r, err := d.lookup(use)
	if err != nil {
		return err
	}
	return r.SetLimit(limit)
}

// MemoryLimit returns the device's memory limit, or 0 if none is set.
func (d Device) MemoryLimit() int64 {
	if r := d.peek(); r != nil {
		return r.Limit()
	}
	return 0
}
