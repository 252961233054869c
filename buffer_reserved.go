package memtrack

// Reserved returns the bytes the device set aside for the buffer: the
// driver's figure, to compare with [Buffer.Size], which is what is tracked.
// Metal rounds every buffer up (its allocatedSize); where a backend reports
// no rounding, as the CPU backend does, Reserved equals Size. It returns 0
// for a nil buffer.
func (b *Buffer) Reserved() int64 {
	if b == nil {
		return 0
	}
	if b.mem.reserved > 0 {
		return b.mem.reserved
	}
	return b.size
}
