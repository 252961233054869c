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
// While a check runs, its device is watched for leaks ([Device.EnableLeakWatch]
// without a handler, if it was not watched) and records the allocation
// site of every buffer ([Device.EnableAllocationSites] at rate 1); [LeakCheck.End]
// puts both back as they were. The device's figures are process-wide: a
// check sees every goroutine's allocations, so checks of one device must
// not overlap unless one is inside the other (a check started and ended
// while another runs), as with tests that do not run in parallel.
type LeakCheck struct {
	dev  Device
	s    *kindState
	dl   *deviceLeaks
	mark uint64 // the entries made before the check

	// What End puts back: whether the check turned sites on, and the rate
	// it replaced (as siteTable.rates holds it).
	sitesOn  bool
	sitesSet bool
	rate     int64
	ended    bool
}

// StartLeakCheck starts a [LeakCheck] of the device. It fails where the
// device does not exist.
func (d Device) StartLeakCheck() (*LeakCheck, error) {
	s, _, err := d.resolve()
	if err != nil {
		return nil, err
	}
	c := &LeakCheck{dev: d, s: s, dl: s.leaks.device(d.ordinal)}
	if sitesBuilt {
		t := &s.sites
		t.mu.Lock()
		if d.ordinal < len(t.rates) {
			c.rate = t.rates[d.ordinal]
		}
		t.mu.Unlock()
		c.sitesSet = true
		if t.lookup(d.ordinal) == nil {
			c.sitesOn = true
			s.sites.enable(d.ordinal, leakCheckDepth)
		}
		s.sites.setRate(d.ordinal, 1)
	}
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
		if w != nil && w != leakGone && w.seq > c.mark && !w.reported && w.state.Load() != watchFreed {
			w.reported = true
			ws = append(ws, w)
		}
	}
	for _, sl := range dl.slots {
		take(sl.w)
	}
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
	if c.sitesSet {
		t := &c.s.sites
		t.mu.Lock()
		if c.dev.ordinal < len(t.rates) {
			t.rates[c.dev.ordinal] = c.rate
		}
		if r := t.recorders.lookup(c.dev.ordinal); r != nil {
			r.rate.Store(t.rate(c.dev.ordinal))
		}
		t.mu.Unlock()
		if c.sitesOn {
			c.s.sites.disable(c.dev.ordinal)
		}
	}
}
