package memtrack

import (
	"cmp"
	"slices"
	"time"
)

// leakCheckDepth is the stack depth a LeakCheck records sites with where
// the device recorded none.
const leakCheckDepth = 32

// LeakCheck lists the buffers and tracked handles allocated on one device
// since it started that are not freed yet: what a test leaks. Package
// [github.com/memtrack/memtrack/memtest] runs one per device around a test.
//
// While a check runs, its device is watched for leaks ([LeakWatcher.Enable]
// without a handler, if it was not watched) and records the allocation
// site of every buffer ([SiteRecorder.Enable] at rate 1); [LeakCheck.End]
// puts both back as they were. The device's figures are process-wide: a
// check sees every goroutine's allocations, so checks of one device must
// not overlap unless one is inside the other (a check started and ended
// while another runs), as with tests that do not run in parallel.
type LeakCheck struct {
	dev  Device
	dl   *deviceLeaks
	mark uint64 // the entries made before the check

	sites siteOverride // what End puts back of the recording of sites
	ended bool
}

// StartCheck starts a [LeakCheck] of the device. It fails where the
// device does not exist.
func (lw LeakWatcher) StartCheck() (*LeakCheck, error) {
	d := lw.dev
	_, f, err := d.features(use)
	if err != nil {
		return nil, err
	}
	c := &LeakCheck{dev: d, dl: &f.leaks}
	c.sites = d.Sites().recordEvery(leakCheckDepth)
	dl := c.dl
	dl.mu.Lock()
	dl.checks++
	dl.switchOn()
	c.mark = dl.seq
	dl.mu.Unlock()
	return c, nil
}

// Device returns the device the check watches.
func (c *LeakCheck) Device() Device { return c.dev }

// Leaks returns the buffers and tracked handles allocated on the device
// since the check started and not freed: those still reachable, and those
// the garbage collector found unreachable (Collected), freed or not. Each
// is returned once, by the first call of Leaks of any check that sees it,
// so that a check inside another does not report its leaks twice.
func (c *LeakCheck) Leaks() []Leak {
	now := time.Now()
	dl := c.dl
	var ws []*watched
	dl.mu.Lock()
	take := func(w *watched) {
		if w != nil && w.seq > c.mark && !w.reported && w.state.Load() != watchFreed {
			w.reported = true
			ws = append(ws, w)
		}
	}
	dl.slots.Each(take)
	for _, w := range dl.leaksSeen {
		take(w)
	}
	slices.SortFunc(ws, func(a, b *watched) int { return cmp.Compare(a.seq, b.seq) })
	ls := make([]Leak, len(ws))
	for i, w := range ws {
		ls[i] = w.leak(now, w.state.Load() == watchLeaked)
		ls[i].Freed = w.freed
	}
	dl.mu.Unlock()
	return ls
}

// End ends the check: the device is watched and records sites again as it
// did before the check. Calling End again does nothing.
func (c *LeakCheck) End() {
	dl := c.dl
	dl.mu.Lock()
	if c.ended {
		dl.mu.Unlock()
		return
	}
	c.ended = true
	dl.checks--
	if dl.checks == 0 {
		clear(dl.leaksSeen)
		dl.leaksSeen = dl.leaksSeen[:0]
	}
	dl.switchOff()
	dl.mu.Unlock()
	c.dev.Sites().restore(c.sites)
}
