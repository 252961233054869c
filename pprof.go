package memtrack

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/google/pprof/profile"
)

// ProfileKind selects the figures [WriteProfile] writes.
type ProfileKind uint8

const (
	// ProfileInUse is the live buffers by allocation site, with the sample
	// types inuse_space (bytes) and inuse_objects (count).
	ProfileInUse ProfileKind = iota

	// ProfilePeak is the live buffers by allocation site at the moment of
	// the latest peak of the recorded bytes (since recording began or the
	// last [Device.ResetPeakMemoryStats]), with the sample types
	// peak_inuse_space (bytes) and peak_inuse_objects (count).
	ProfilePeak
)

// String returns "inuse" or "peak".
func (k ProfileKind) String() string {
	switch k {
	case ProfileInUse:
		return "inuse"
	case ProfilePeak:
		return "peak"
	}
	return fmt.Sprintf("ProfileKind(%d)", uint8(k))
}

// otherFunction names the site that holds the allocations past
// [MaxAllocationSites] distinct stacks.
const otherFunction = "memtrack.other"

// WriteProfile writes the device's recorded buffers by allocation site, now
// or at the latest peak, as a gzipped pprof protocol buffer that go tool
// pprof reads (-top, -http, flame graphs). It fails with an error matching
// [ErrSitesNotRecorded] unless [Device.EnableAllocationSites] was called,
// and writes nothing then.
func WriteProfile(w io.Writer, d Device, kind ProfileKind) error {
	if kind > ProfilePeak {
		return fmt.Errorf("%w: %v", ErrInvalidProfileKind, kind)
	}
	r, err := d.recorder()
	if err != nil {
		return err
	}
	sites, st := r.snapshot(kind == ProfilePeak)
	return buildProfile(d, kind, sites, st).Write(w)
}

// buildProfile turns the sites into a profile, with one location per
// program counter and its inlined frames as lines.
func buildProfile(d Device, kind ProfileKind, sites []siteFigures, st SiteStats) *profile.Profile {
	prefix := ""
	if kind == ProfilePeak {
		prefix = "peak_"
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: prefix + "inuse_objects", Unit: "count"},
			{Type: prefix + "inuse_space", Unit: "bytes"},
		},
		DefaultSampleType: prefix + "inuse_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            1,
		TimeNanos:         time.Now().UnixNano(),
		Comments: []string{
			fmt.Sprintf("memtrack: %s memory of %v by allocation site, stacks of at most %d frames", kind, d, st.Depth),
			fmt.Sprintf("memtrack: %d allocations folded into %s past %d sites", st.Folded, otherFunction, MaxAllocationSites),
		},
	}
	// One mapping, for the executable, already symbolized: pprof then
	// neither looks for the binary nor symbolizes again.
	exe, _ := os.Executable()
	p.Mapping = []*profile.Mapping{{ID: 1, Limit: ^uint64(0), File: exe, HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}}
	b := profileBuilder{p: p, locs: map[uintptr]*profile.Location{}, funcs: map[[2]string]*profile.Function{}}
	for _, s := range sites {
		var locs []*profile.Location
		if s.pcs == nil {
			locs = []*profile.Location{b.other()}
		}
		for _, pc := range s.pcs {
			if l := b.location(pc); l != nil {
				locs = append(locs, l)
			}
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: locs,
			Value:    []int64{s.objects, s.bytes},
			Label:    map[string][]string{"device": {d.String()}},
		})
	}
	return p
}

// profileBuilder adds locations and functions to a profile, once each.
type profileBuilder struct {
	p     *profile.Profile
	locs  map[uintptr]*profile.Location
	funcs map[[2]string]*profile.Function
}

// location returns the location of a return address from runtime.Callers,
// or nil for runtime.goexit, which ends every goroutine's stack.
func (b *profileBuilder) location(pc uintptr) *profile.Location {
	if l, ok := b.locs[pc]; ok {
		return l
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: b.p.Mapping[0], Address: uint64(pc)}
	frames := runtime.CallersFrames([]uintptr{pc})
	for {
		f, more := frames.Next()
		if f.Function != "runtime.goexit" && (f.Function != "" || f.File != "") {
			l.Line = append(l.Line, profile.Line{Function: b.function(f.Function, f.File), Line: int64(f.Line)})
		}
		if !more {
			break
		}
	}
	if len(l.Line) == 0 {
		l = nil
	} else {
		b.p.Location = append(b.p.Location, l)
	}
	b.locs[pc] = l
	return l
}

func (b *profileBuilder) function(name, file string) *profile.Function {
	k := [2]string{name, file}
	if f, ok := b.funcs[k]; ok {
		return f
	}
	f := &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name, Filename: file}
	b.p.Function = append(b.p.Function, f)
	b.funcs[k] = f
	return f
}

// other returns the location of the site of folded allocations.
func (b *profileBuilder) other() *profile.Location {
	if l, ok := b.locs[0]; ok && l != nil {
		return l
	}
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: b.p.Mapping[0], Line: []profile.Line{{Function: b.function(otherFunction, "")}}}
	b.p.Location = append(b.p.Location, l)
	b.locs[0] = l
	return l
}
