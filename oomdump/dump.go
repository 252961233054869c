package oomdump

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/memtrack/memtrack"
	"github.com/memtrack/memtrack/pprof"
	"github.com/memtrack/memtrack/trace"
)

// DefaultMinInterval is the least time between two dumps of one [Dumper]
// where [Options].MinInterval is 0.
const DefaultMinInterval = time.Minute

// ErrInvalidDir: [Install] or [Write] was given an empty directory name.
var ErrInvalidDir = errors.New("memtrack: invalid dump directory")

// Options tune a [Dumper].
type Options struct {
	// MinInterval is the least time between two dumps: the first refusal
	// is dumped at once, and a later one only once MinInterval has passed
	// since the last dump began. 0 means [DefaultMinInterval]; a negative
	// interval is an error.
	MinInterval time.Duration
	// Logger receives the one report of a dump that could not be written;
	// nil means [slog.Default].
	Logger *slog.Logger
}

// Dumper writes dumps of one device's refused allocations into a
// directory; [Install] makes one.
type Dumper struct {
	dev      memtrack.Device
	dir      string
	interval time.Duration
	logger   *slog.Logger
	obs      *memtrack.OutOfMemoryObserver

	mu        sync.Mutex
	last      time.Time // when the last dump began; zero before the first
	dumps     []string
	skipped   int
	unwritten int
	warned    bool
}

// Install registers a [Dumper] of device d's refused allocations: the
// first refusal writes a dump into a new directory under dir, named for
// the device and the time ("oom-cuda0-20260102T150405Z-..."), and later
// refusals write one only where opt.MinInterval has passed since the last.
// dir is created where it does not exist when the first dump is written,
// not now. Remove it with [Dumper.Remove]. Installing twice on one device
// makes two Dumpers, each writing its own dumps.
//
// It fails with [ErrInvalidDir] for an empty dir, with an error matching
// [memtrack.ErrInvalidArgument] for a negative interval, and as
// [memtrack.Device.OnOutOfMemory] does.
func Install(d memtrack.Device, dir string, opt Options) (*Dumper, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty name", ErrInvalidDir)
	}
	if opt.MinInterval < 0 {
		return nil, fmt.Errorf("%w: oomdump interval %v is negative", memtrack.ErrInvalidArgument, opt.MinInterval)
	}
	du := &Dumper{dev: d, dir: dir, interval: opt.MinInterval, logger: opt.Logger}
	if du.interval == 0 {
		du.interval = DefaultMinInterval
	}
	if du.logger == nil {
		du.logger = slog.Default()
	}
	obs, err := d.OnOutOfMemory(du.observe)
	if err != nil {
		return nil, err
	}
	du.obs = obs
	return du, nil
}

// Remove stops the Dumper; see [memtrack.OutOfMemoryObserver.Remove].
func (du *Dumper) Remove() error { return du.obs.Remove() }

// Dumps returns the directories of the dumps written so far, the oldest
// first.
func (du *Dumper) Dumps() []string {
	du.mu.Lock()
	defer du.mu.Unlock()
	return append([]string(nil), du.dumps...)
}

// Skipped returns how many refusals came within MinInterval of a dump and
// were not dumped.
func (du *Dumper) Skipped() int {
	du.mu.Lock()
	defer du.mu.Unlock()
	return du.skipped
}

// Unwritten returns how many dumps could not be written (wholly or in
// part).
func (du *Dumper) Unwritten() int {
	du.mu.Lock()
	defer du.mu.Unlock()
	return du.unwritten
}

// observe is the Dumper's observer: it dumps e now.
func (du *Dumper) observe(e *memtrack.OutOfMemoryError) { du.dump(e, time.Now()) }

// dump writes the dump of e, refused at now, unless it comes within the
// interval of the last dump.
func (du *Dumper) dump(e *memtrack.OutOfMemoryError, now time.Time) {
	du.mu.Lock()
	if !du.last.IsZero() && now.Sub(du.last) < du.interval {
		du.skipped++
		du.mu.Unlock()
		return
	}
	du.last = now
	du.mu.Unlock()

	path, err := write(du.dir, e, now)
	du.mu.Lock()
	defer du.mu.Unlock()
	if path != "" {
		du.dumps = append(du.dumps, path)
	}
	if err != nil {
		du.unwritten++
		if !du.warned {
			du.warned = true
			du.logger.Error("memtrack: the out-of-memory dump could not be written; later failures of this dumper are not logged",
				"device", e.Device.String(), "dir", du.dir, "err", err.Error())
		}
	}
}

// Write writes the dump of one refusal into a new directory under dir
// (created where it does not exist) and returns its path, with the first
// error met. A dump that could not be written whole keeps the files that
// were.
func Write(dir string, e *memtrack.OutOfMemoryError) (string, error) {
	if dir == "" {
		return "", fmt.Errorf("%w: empty name", ErrInvalidDir)
	}
	if e == nil {
		return "", fmt.Errorf("%w: a nil *memtrack.OutOfMemoryError", memtrack.ErrInvalidArgument)
	}
	return write(dir, e, time.Now())
}

// dumpStats is the content of stats.json: the fields of the device's
// Stats and, where it has categories, their rows (as memtrack.Expvar
// writes a device).
type dumpStats struct {
	memtrack.Stats
	Categories []memtrack.CategoryStats `json:",omitempty"`
}

func write(dir string, e *memtrack.OutOfMemoryError, now time.Time) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("memtrack: oomdump: %w", err)
	}
	name := "oom-" + strings.ReplaceAll(e.Device.String(), ":", "") + "-" + now.UTC().Format("20060102T150405Z") + "-"
	path, err := os.MkdirTemp(dir, name)
	if err != nil {
		return "", fmt.Errorf("memtrack: oomdump: %w", err)
	}
	d := e.Device
	var errs []error
	var missing []string
	file := func(name string, w func(io.Writer) error) {
		f, err := os.Create(filepath.Join(path, name))
		if err != nil {
			errs = append(errs, err)
			return
		}
		err = w(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
			if errors.Is(err, memtrack.ErrSitesNotRecorded) || errors.Is(err, memtrack.ErrHistoryNotRecorded) {
				missing = append(missing, fmt.Sprintf("%s: not written: %v", name, err))
				return
			}
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
	}
	file("stats.json", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(dumpStats{Stats: d.MemoryStats(), Categories: d.CategoryStats()})
	})
	file("inuse.pb.gz", func(w io.Writer) error { return pprof.WriteProfile(w, d, pprof.InUse) })
	file("peak.pb.gz", func(w io.Writer) error { return pprof.WriteProfile(w, d, pprof.Peak) })
	file("trace.json", func(w io.Writer) error {
		h, err := d.History().Snapshot()
		if err != nil {
			return err
		}
		return trace.Write(w, h)
	})
	file("report.txt", func(w io.Writer) error {
		fmt.Fprintf(w, "%+v\n", e)
		for _, m := range missing {
			fmt.Fprintf(w, "dump: %s\n", m)
		}
		_, err := fmt.Fprintf(w, "dump: written at %s\n", now.UTC().Format(time.RFC3339Nano))
		return err
	})
	if len(errs) > 0 {
		return path, fmt.Errorf("memtrack: oomdump into %s: %w", path, errors.Join(errs...))
	}
	return path, nil
}
