package memtrack_test

import (
	"log"
	"log/slog"
	"os"
	"runtime"

	"github.com/memtrack/memtrack"
)

// loadScratch allocates a buffer and forgets to free it.
//
//go:noinline
func loadScratch(d memtrack.Device) {
	if _, err := d.Alloc(4096); err != nil {
		log.Fatal(err)
	}
}

// Watch a device for leaks: a buffer the garbage collector finds
// unreachable without Free is reported (here by the default logger, one
// warning per site per interval, on stdout without its time, age, file
// and stack) and, with Free, freed.
func ExampleLeakWatcher_Enable() {
	d := memtrack.CPU()
	// Sites name the leak's allocation site; rate 1 records every one.
	if err := d.Sites().SetRate(1); err != nil {
		log.Fatal(err)
	}
	defer d.Sites().SetRate(0)
	if err := d.Sites().Enable(8); err != nil {
		log.Fatal(err)
	}
	defer d.Sites().Disable()

	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			switch a.Key {
			case slog.TimeKey, "age", "file", "stack":
				return slog.Attr{}
			}
			return a
		},
	}))
	warnings := memtrack.NewLeakLogger(logger, memtrack.DefaultLeakLogInterval)
	found := make(chan struct{})
	err := d.Leaks().Enable(memtrack.LeakWatch{
		Handler: func(l memtrack.Leak) {
			warnings.Handle(l)
			close(found)
		},
		FreeLeaks: true,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer d.Leaks().Disable()

	loadScratch(d)
	for waiting := true; waiting; { // the next garbage cycle finds it
		runtime.GC()
		select {
		case <-found:
			waiting = false
		default:
			runtime.Gosched()
		}
	}
	// Output:
	// level=WARN msg="memtrack: leaked buffer: the garbage collector found it unreachable without a free" device=cpu bytes=4096 site=github.com/memtrack/memtrack_test.loadScratch freed=true leaks=1 leaked_bytes=4096
}
