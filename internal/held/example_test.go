package held_test

import (
	"fmt"

	"github.com/memtrack/memtrack/internal/held"
)

// event is a driver's event in this example: the number of the free it
// follows on its stream.
type event int

// querier is a driver whose one stream has run the frees up to ran.
type querier struct {
	ran     event
	reached []int // of the last query, for each stream
	queries int
}

func (q *querier) Query(events []event, ends []int) bool {
	q.queries++
	q.reached = q.reached[:0]
	start := 0
	for _, end := range ends {
		n := 0
		for _, e := range events[start:end] {
			if e > q.ran {
				break
			}
			n++
		}
		q.reached = append(q.reached, n)
		start = end
	}
	return true
}

func (q *querier) Reached(i int) (int, bool) { return q.reached[i], true }
func (q *querier) Destroy(e event)           {}

// An adapter counts an allocation with Add, a free that returns the memory
// at once with Drop, and a free in stream order with Enqueue, the event it
// recorded after the free beside it. A reading (Load) asks the driver once,
// and uncounts the frees the stream has run; so does an allocation that
// would raise the peak, first, and one within the peak asks nothing.
func Example() {
	q := new(querier)
	var f held.Figure[event, *querier]
	f.Init(q)
	f.Add(3<<20, false) // an allocation freed at once
	f.Drop(3<<20, false)
	s := held.Stream{Context: 1, Handle: 7, Ordered: true}
	for seq := 1; seq <= 3; seq++ {
		f.Add(1<<20, true)
		n := f.TakeSpare() // none yet: the first events are new
		if n == nil {
			n = new(held.Free[event])
		}
		*n = held.Free[event]{Event: event(seq), Stream: s, Seq: uint64(seq), Size: 1 << 20}
		f.Enqueue(n)
	}
	q.ran = 2 // the stream has run the first two frees
	cur, peak := f.Load()
	fmt.Printf("held %d MiB, peak %d MiB, after %d query\n", cur>>20, peak>>20, q.queries)
	// Output: held 1 MiB, peak 3 MiB, after 1 query
}
