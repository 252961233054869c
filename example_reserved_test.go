package memtrack_test

import (
	"fmt"

	"github.com/memtrack/memtrack"
)

// Reserved is the driver's figure for a buffer beside the size that is
// tracked. A Metal buffer reserves whole pages; the CPU backend reserves
// exactly the size asked for.
func ExampleBuffer_Reserved() {
	buf, err := memtrack.CPU().Alloc(1000)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Free()
	fmt.Println(buf.Size(), buf.Reserved())
	// Output: 1000 1000
}
