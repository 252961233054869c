// Package pprof writes the allocation sites that package memtrack records
// as pprof profiles, the format go tool pprof reads, and serves them over
// HTTP beside net/http/pprof.
//
// Record the sites with [memtrack.SiteRecorder.Enable], then write
// the live buffers ([InUse]) or those live at the latest peak ([Peak]):
//
//	dev.Sites().Enable(32)
//	...
//	pprof.WriteProfile(f, dev, pprof.Peak)
//	// go tool pprof -top peak.pb.gz
//
// Every sample has the label device ("cuda:0"), and a sample of buffers
// allocated through a category ([memtrack.Category]) the label category,
// so that a profile is cut by category with pprof's tag filters:
//
//	go tool pprof -tagfocus category=kv_cache -top peak.pb.gz
package pprof

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/google/pprof/profile"
	"github.com/memtrack/memtrack"
)

// ErrInvalidKind: a [Kind] that is neither [InUse] nor [Peak].
var ErrInvalidKind = errors.New("memtrack: invalid profile kind")

// Kind selects the figures [WriteProfile] writes.
type Kind uint8

const (
	// InUse is the live buffers by allocation site, with the sample types
	// inuse_space (bytes) and inuse_objects (count).
	InUse Kind = iota

	// Peak is the live buffers by allocation site at the moment of the
	// latest peak of the recorded bytes (since recording began or the last
	// [memtrack.Device.ResetPeakMemoryStats]), with the sample types
	// peak_inuse_space (bytes) and peak_inuse_objects (count).
	Peak
)

// String returns "inuse" or "peak".
func (k Kind) String() string {
	switch k {
	case InUse:
		return "inuse"
	case Peak:
		return "peak"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// WriteProfile writes the device's recorded buffers by allocation site, now
// or at the latest peak, as a gzipped pprof protocol buffer that go tool
// pprof reads (-top, -http, flame graphs). As in Go's heap profiles, the
// profile's Period is the sampling rate ([memtrack.SiteRecorder.SetRate]),
// a comment says it, and the values are scaled estimates (exact at rate 1). It fails with an error matching
// [memtrack.ErrSitesNotRecorded] unless
// [memtrack.SiteRecorder.Enable] was called, and writes nothing
// then.
func WriteProfile(w io.Writer, d memtrack.Device, kind Kind) error {
	var (
		snap memtrack.SiteSnapshot
		err  error
	)
	switch kind {
	case InUse:
		snap, err = d.Sites().Snapshot()
	case Peak:
		snap, err = d.Sites().PeakSnapshot()
	default:
		return fmt.Errorf("%w: %v", ErrInvalidKind, kind)
	}
	if err != nil {
		return err
	}
	return build(snap).Write(w)
}

// build turns the sites into a profile, with one location per program
// counter and its inlined frames as lines.
func build(snap memtrack.SiteSnapshot) *profile.Profile {
	d, st, kind, prefix := snap.Device, snap.Stats, InUse, ""
	if snap.AtPeak {
		kind, prefix = Peak, "peak_"
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: prefix + "inuse_objects", Unit: "count"},
			{Type: prefix + "inuse_space", Unit: "bytes"},
		},
		DefaultSampleType: prefix + "inuse_space",
		// As in Go's heap profiles, the period is the sampling rate: on
		// average one sample per Period bytes, the values already scaled.
		PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:     st.Rate,
		TimeNanos:  time.Now().UnixNano(),
		Comments: []string{
			fmt.Sprintf("memtrack: %s memory of %v by allocation site, stacks of at most %d frames", kind, d, st.Depth),
			sampling(st.Rate),
			fmt.Sprintf("memtrack: %d sampled allocations folded into %s past %d sites", st.Folded, memtrack.OtherSite, memtrack.MaxAllocationSites),
		},
	}
	// One mapping, for the executable, already symbolized: pprof then
	// neither looks for the binary nor symbolizes again.
	exe, _ := os.Executable()
	p.Mapping = []*profile.Mapping{{ID: 1, Limit: ^uint64(0), File: exe, HasFunctions: true, HasFilenames: true, HasLineNumbers: true, HasInlineFrames: true}}
	b := profileBuilder{p: p, locs: map[uintptr]*profile.Location{}, funcs: map[[2]string]*profile.Function{}}
	for _, s := range snap.Sites {
		var locs []*profile.Location
		if s.Stack == nil {
			locs = []*profile.Location{b.other()}
		}
		for _, pc := range s.Stack {
			if l := b.location(pc); l != nil {
				locs = append(locs, l)
			}
		}
		labels := map[string][]string{"device": {d.String()}}
		if s.Category != "" {
			labels["category"] = []string{s.Category}
		}
		p.Sample = append(p.Sample, &profile.Sample{
			Location: locs,
			Value:    []int64{s.Buffers, s.Bytes},
			Label:    labels,
		})
	}
	return p
}

// sampling describes the sampling rate in a comment of the profile.
func sampling(rate int64) string {
	if rate <= 1 {
		return "memtrack: every allocation recorded (sampling rate 1)"
	}
	return fmt.Sprintf("memtrack: sampled, on average one sample per %d bytes allocated (Device.Sites().SetRate); values scaled to estimate all allocations", rate)
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
	l := &profile.Location{ID: uint64(len(b.p.Location) + 1), Mapping: b.p.Mapping[0], Line: []profile.Line{{Function: b.function(memtrack.OtherSite, "")}}}
	b.p.Location = append(b.p.Location, l)
	b.locs[0] = l
	return l
}
