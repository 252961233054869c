package held_test

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/held"
)

// event is a driver's event in this example.
type event int

// driver is a device with one stream, busy until the test says it is idle.
type driver struct {
	idle    bool
	queries int
}

// Query answers for the one stream: idle, or busy, in which case it
// records an event (never reached, in this example).
func (d *driver) Query(qs []held.Query[event]) bool {
	d.queries++
	for i := range qs {
		q := &qs[i]
		switch {
		case q.Ask && d.idle:
			q.Reached, q.Idle = len(q.Events), true
		case d.idle:
			q.Reached = len(q.Events)
		case q.Record:
			q.Recorded = 1
		}
	}
	return true
}

func (d *driver) Destroy(event) {}

// An adapter counts an allocation with Add (the Order taken before it
// asked the driver), a free that returns the memory at once with Drop, and
// a free in stream order with Freed, which asks the driver nothing. An
// allocation on a stream takes over the bytes of the frees pending there,
// as the driver's pool reuses them. A reading (Load) asks the driver once
// per stream with frees pending: here the stream is busy, and the last
// free stays counted until a reading finds the stream idle.
func Example() {
	d := new(driver)
	var f held.Figure[event, *driver]
	f.Init(d, true)
	s := held.Stream{Handle: 7, Context: 1, Ordered: true}
	for range 3 {
		at := f.Order()
		f.Add(1<<20, true, s.Handle, at) // takes over the last free's MiB
		f.Freed(s, 1<<20)
	}
	cur, peak := f.Load()
	fmt.Printf("busy: held %d MiB, peak %d MiB, after %d query\n", cur>>20, peak>>20, d.queries)
	d.idle = true
	cur, peak = f.Load()
	fmt.Printf("idle: held %d MiB, peak %d MiB, after %d queries\n", cur>>20, peak>>20, d.queries)
	// Output:
	// busy: held 1 MiB, peak 1 MiB, after 1 query
	// idle: held 0 MiB, peak 1 MiB, after 2 queries
}
