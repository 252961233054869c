package web

import (
	"runtime"
	"strings"
	"time"

	"github.com/memtrack/memtrack"
)

// MaxPoints is about the most points a device's plot gets: a longer
// history is thinned to the lowest and highest figure of each run of
// consecutive events (and the highest point, the first and last points and
// those beside a gap are always kept), so that the page stays light with a
// ring of millions of events. The history is read in place, one event at a
// time (memtrack.HistoryRecorder.Range): a read holds memory for the
// points it sends, not for the events it reads.
const MaxPoints = 4000

// TopSites is how many of the largest allocation sites at the peak the
// plot stacks one by one; the others are stacked as one.
const TopSites = 6

// Page is what the page shows, as the handler serves it at data.json.
type Page struct {
	Time    time.Time `json:"time"` // when it was read
	Devices []Device  `json:"devices"`
}

// Device is one used device's figures and history.
type Device struct {
	Name         string `json:"name"`
	Tracked      int64  `json:"tracked"`     // MemoryAllocated
	PeakTracked  int64  `json:"peakTracked"` // MaxMemoryAllocated
	Limit        int64  `json:"limit"`       // 0: none
	Buffers      int64  `json:"buffers"`
	FailedAllocs int64  `json:"failedAllocs"`
	// Free and Total are what the OS or driver reports for the device;
	// InfoError says why they are missing.
	Free      int64    `json:"free"`
	Total     int64    `json:"total"`
	InfoError string   `json:"infoError,omitempty"`
	Sites     bool     `json:"sites"` // allocation sites are recorded
	History   *History `json:"history,omitempty"`
	// Categories are the figures of the device's categories and of the
	// memory outside them (Category); absent without categories.
	Categories []Category `json:"categories,omitempty"`
	// The driver's per-process figures ([memtrack.Usage]), on a CUDA GPU
	// where NVML gives them (PerProcess); PerProcessError says why not
	// where it does not.
	PerProcess         bool      `json:"perProcess"`
	ProcessUsed        int64     `json:"processUsed"`
	ProcessUntracked   int64     `json:"processUntracked"`
	OtherProcessesUsed int64     `json:"otherProcessesUsed"`
	OtherProcesses     []Process `json:"otherProcesses,omitempty"`
	PerProcessError    string    `json:"perProcessError,omitempty"`
	// GraphReserved and GraphUsed are the driver's figures of the memory
	// it keeps for CUDA graphs ([memtrack.Usage]), untracked; 0 where the
	// device has none.
	GraphReserved int64 `json:"graphReserved,omitempty"`
	GraphUsed     int64 `json:"graphUsed,omitempty"`
	// AddressSpace is the address space the device's reservations hold
	// ([memtrack.Stats]), mapped or not, and Reservations how many they
	// are; 0 where it has none.
	AddressSpace int64 `json:"addressSpace,omitempty"`
	Reservations int64 `json:"reservations,omitempty"`
}

// History is a device's history as the plot draws it: times in
// milliseconds since the history began.
type History struct {
	MaxEntries  int    `json:"maxEntries"`
	Events      int    `json:"events"` // events read (before thinning)
	Overwritten uint64 `json:"overwritten"`
	Lost        uint64 `json:"lost"`
	// T and Bytes are the plotted points: the tracked figure after each
	// allocation and free.
	T     []float64 `json:"t"`
	Bytes []int64   `json:"bytes"`
	// Max is the highest point, with its time: the device's peak when
	// it happened within the history (MaxAtPeak).
	Max       int64     `json:"max"`
	MaxT      float64   `json:"maxT"`
	MaxAtPeak bool      `json:"maxAtPeak"`
	Gaps      []Gap     `json:"gaps,omitempty"`
	Refusals  []Refusal `json:"refusals,omitempty"`
	// Marks are the history's marks and spans (Mark), the oldest
	// first; past MaxMarks, the newest MaxMarks, and MarksLeftOut counts
	// the others. MarkEvents counts the events of marks read (among
	// Events: they are no points).
	Marks        []Mark `json:"marks,omitempty"`
	MarksLeftOut int    `json:"marksLeftOut,omitempty"`
	MarkEvents   int    `json:"markEvents,omitempty"`
	// Sites, when allocation sites are recorded, are the bytes live from
	// the largest sites at the peak (by the innermost function that
	// allocated), one value per point; the last is the rest.
	Sites []SiteSeries `json:"sites,omitempty"`
	// Categories, when the history has events in categories, are each
	// category's tracked bytes at each point (past TopCategories, those
	// that track the most at the highest point, then the others as
	// OtherCategories), the last "uncategorised".
	Categories []SiteSeries `json:"categories,omitempty"`
}

// Gap is a run of lost events: no line is drawn across it.
type Gap struct {
	From    float64 `json:"from"`
	To      float64 `json:"to"`
	Missing uint64  `json:"missing"`
}

// Refusal is a refused allocation.
type Refusal struct {
	T    float64 `json:"t"`
	Kind string  `json:"kind"` // limit, oom or failed
	Size int64   `json:"size"`
}

// SiteSeries is the live bytes of one allocation site over the points.
type SiteSeries struct {
	Name  string  `json:"name"`
	Bytes []int64 `json:"bytes"`
}

// Read reads the page's figures for every used device.
func Read() Page {
	p := Page{Time: time.Now(), Devices: []Device{}}
	for _, d := range memtrack.UsedDevices() {
		p.Devices = append(p.Devices, readDevice(d))
	}
	return p
}

func readDevice(d memtrack.Device) Device {
	s := d.MemoryStats()
	out := Device{Name: d.String(), Tracked: s.Tracked, PeakTracked: s.PeakTracked, Limit: s.Limit, Buffers: s.Buffers, FailedAllocs: s.FailedAllocs,
		AddressSpace: s.AddressSpace, Reservations: s.Reservations}
	out.Categories = categories(d)
	if u, err := d.Usage(); err != nil {
		out.InfoError = err.Error()
	} else {
		out.Free, out.Total = u.Free, u.Total
		out.GraphReserved, out.GraphUsed = u.GraphReserved, u.GraphUsed
		processes(&out, u)
	}
	out.Sites = d.Sites().Stats().Enabled
	p := newPlotter(MaxPoints)
	h, err := d.History().Range(p.add)
	if err != nil {
		return out
	}
	out.History = p.finish(h, s.PeakTracked, liveSites(d, out.Sites))
	return out
}

// liveSites returns the live bytes of the device's sites by name, if they
// are recorded (on), and nil if not.
func liveSites(d memtrack.Device, on bool) map[string]int64 {
	if !on {
		return nil
	}
	snap, err := d.Sites().Snapshot()
	if err != nil {
		return nil
	}
	now := make(map[string]int64)
	for _, st := range snap.Sites {
		now[siteName(st.Stack)] += st.Bytes
	}
	return now
}

// siteName names an allocation site by its two innermost functions, the
// one that called Alloc and its caller: "model.alloc ← model.loadWeights".
func siteName(stack []uintptr) string {
	if len(stack) == 0 {
		return memtrack.OtherSite
	}
	frames := runtime.CallersFrames(stack)
	var name string
	for i := 0; i < 2; i++ {
		f, more := frames.Next()
		fn := f.Function
		if fn == "" {
			fn = "unknown"
		}
		fn = fn[strings.LastIndexByte(fn, '/')+1:]
		if i == 0 {
			name = fn
		} else {
			name += " ← " + fn
		}
		if !more {
			break
		}
	}
	return name
}
