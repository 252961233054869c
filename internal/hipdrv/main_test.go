//go:build rocm

package hipdrv_test

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/memtrack/memtrack/internal/hipdrv"
)

// holdEnv makes the test binary a process that holds device memory on the
// fake machine (FAKEHIP_MACHINE) until its standard input closes: it
// allocates that many bytes on device 0, prints "held", and exits once
// stdin ends, freeing nothing itself (the machine reaps an exited process).
const holdEnv = "MEMTRACK_HIPDRV_HOLD"

func TestMain(m *testing.M) {
	if s := os.Getenv(holdEnv); s != "" {
		os.Exit(hold(s))
	}
	os.Exit(m.Run())
}

func hold(s string) int {
	n, err := strconv.ParseInt(s, 10, 64)
	if err == nil {
		_, err = hipdrv.Load()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, c := hipdrv.Alloc(0, n); c != (hipdrv.Call{}) {
		fmt.Fprintf(os.Stderr, "hipMalloc of %d bytes: %+v\n", n, c)
		return 1
	}
	fmt.Println("held")
	for sc := bufio.NewScanner(os.Stdin); sc.Scan(); {
	}
	return 0
}
