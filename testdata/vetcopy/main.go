// Command vetcopy copies a memtrack.Buffer: TestBufferCopyIsReportedByVet
// runs go vet on it and expects the copylocks check to report the copy.
package main

import "github.com/memtrack/memtrack"

func main() {
	b, err := memtrack.CPU().Alloc(64)
	if err != nil {
		panic(err)
	}
	c := *b // go vet: assignment copies lock value
	_ = b.Free()
	_ = c.Free()
}
