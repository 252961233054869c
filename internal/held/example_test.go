package held_test

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/held"
)

// event is a driver's event in this example: the number of the free it
// follows on its stream.
type event int

// driver is a device whose one stream has run the frees up to ran.
type driver struct {
	ran     event
	queries int
}

// Query answers for each stream how many of its events, from the oldest,
// the stream has reached.
func (d *driver) Query(qs []held.Query[event]) bool {
	d.queries++
	for i := range qs {
		for _, e := range qs[i].Events {
			if e > d.ran {
				break
			}
			qs[i].Reached++
		}
	}
	return true
}

func (d *driver) Destroy(event) {}

// An adapter counts an allocation with Add (the Order taken before it
// asked the driver), a free that returns the memory at once with Drop, and
// a free in stream order with Freed, the event it recorded after the free
// beside it. An allocation on a stream takes over the bytes of the frees
// pending there, as the driver's pool reuses them. A reading (Load) asks
// the driver once, and uncounts the frees the stream has run.
func Example() {
	d := new(driver)
	var f held.Figure[event, *driver]
	f.Init(d, true)
	s := held.Stream{Handle: 7, Ordered: true}
	f.Add(3<<20, false, 0, 0) // an allocation freed at once
	f.Drop(3<<20, false)
	for seq := 1; seq <= 3; seq++ {
		at := f.Order()
		f.Add(1<<20, true, s.Handle, at) // takes over the last free's MiB
		f.Freed(held.Free[event]{Event: event(seq), Stream: s, Seq: uint64(seq), Size: 1 << 20})
	}
	cur, peak := f.Load()
	fmt.Printf("held %d MiB, peak %d MiB, after %d query\n", cur>>20, peak>>20, d.queries)
	d.ran = 3 // the stream has run the three frees
	cur, peak = f.Load()
	fmt.Printf("held %d MiB, peak %d MiB, after %d queries\n", cur>>20, peak>>20, d.queries)
	// Output:
	// held 1 MiB, peak 3 MiB, after 1 query
	// held 0 MiB, peak 3 MiB, after 2 queries
}
