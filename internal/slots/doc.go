// Package slots is the table of entries of package memtrack's leak watch:
// one slot per watched buffer or handle, numbered from 1 so that 0 means
// none, each holding the entry and the address of the object it is for.
// A freed slot is reused; a slot can also be kept for good (Keep), as the
// leak watch keeps the slot of a leak whose memory it freed, so that a
// later free of the object, found by its address, is refused.
//
// A Table is not safe for concurrent use: its owner locks it.
package slots
