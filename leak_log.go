package memtrack

import (
	"context"
	"github.com/memtrack/memtrack/internal/siterec"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultLeakLogInterval is the least time between two warnings about one
// allocation site from the [LeakLogger] that [LeakWatcher.Enable] uses
// when no handler is given.
const DefaultLeakLogInterval = time.Minute

// maxLeakLogSites bounds the sites a LeakLogger remembers; leaks from
// further sites share the rate of leaks without a site.
const maxLeakLogSites = 1024

// LeakLogger reports leaks as structured warnings on a [slog.Logger], at
// most one per allocation site (and device) per interval: the first leak
// from a site is logged at once, and the leaks that follow within the
// interval are counted and logged with the next warning from that site.
// Leaks whose site was not recorded share one rate per device. Its Handle
// method is a [LeakWatch] handler; it is safe for concurrent use.
type LeakLogger struct {
	logger *slog.Logger // nil: slog.Default() at each warning
	every  time.Duration

	mu    sync.Mutex
	sites map[leakSiteKey]*leakSiteLog
}

type leakSiteKey struct {
	dev  Device
	hash uint64 // hashStack of the stack; 0 for none, or past maxLeakLogSites
}

// leakSiteLog is what a LeakLogger remembers of one site: when it last
// warned, and the leaks it has not reported since.
type leakSiteLog struct {
	last         time.Time
	pending      int64
	pendingBytes int64
	everReported bool
}

// NewLeakLogger returns a LeakLogger that warns on l (nil: [slog.Default]
// as it is at each warning) at most once per site per every (every <= 0:
// at every leak).
func NewLeakLogger(l *slog.Logger, every time.Duration) *LeakLogger {
	return &LeakLogger{logger: l, every: every, sites: make(map[leakSiteKey]*leakSiteLog)}
}

// Handle reports l, or counts it for the site's next warning.
func (g *LeakLogger) Handle(l Leak) { g.handle(l, time.Now()) }

// handle is Handle of a leak that comes at now.
func (g *LeakLogger) handle(l Leak, now time.Time) {
	key := leakSiteKey{dev: l.Device}
	if l.Stack != nil {
		key.hash = siterec.HashStack(l.Stack)
	}
	g.mu.Lock()
	s := g.sites[key]
	if s == nil {
		if len(g.sites) >= maxLeakLogSites {
			key.hash = 0
			s = g.sites[key]
		}
		if s == nil {
			s = new(leakSiteLog)
			g.sites[key] = s
		}
	}
	s.pending++
	s.pendingBytes += l.Size
	if s.everReported && now.Sub(s.last) < g.every {
		g.mu.Unlock()
		return
	}
	n, bytes := s.pending, s.pendingBytes
	s.last, s.pending, s.pendingBytes, s.everReported = now, 0, 0, true
	g.mu.Unlock()

	logger := g.logger
	if logger == nil {
		logger = slog.Default()
	}
	logger.LogAttrs(context.Background(), slog.LevelWarn, leakMessage(l), leakAttrs(l, n, bytes)...)
}

func leakMessage(l Leak) string {
	what := "buffer"
	if l.Tracked {
		what = "tracked handle"
	}
	msg := "memtrack: leaked " + what + ": the garbage collector found it unreachable without a free"
	if !l.Collected {
		msg = "memtrack: leaked " + what + ": still live"
	}
	return msg
}

// leakAttrs describes l, and the leaks from its site since the site's last
// warning (n of them, bytes in all, l included).
func leakAttrs(l Leak, n, bytes int64) []slog.Attr {
	fn, file := l.Site()
	attrs := []slog.Attr{
		slog.String("device", l.Device.String()),
		slog.Int64("bytes", l.Size),
		slog.Duration("age", l.Age),
		slog.String("site", fn),
		slog.String("file", file),
		slog.Bool("freed", l.Freed),
		slog.Int64("leaks", n),
		slog.Int64("leaked_bytes", bytes),
	}
	if l.Err != nil {
		attrs = append(attrs, slog.String("error", l.Err.Error()))
	}
	if len(l.Stack) > 1 {
		attrs = append(attrs, slog.String("stack", l.StackString()))
	}
	return attrs
}

// Site names the innermost frame of the leak's allocation stack: its
// function ("main.loadWeights") and its file's base name and line
// ("main.go:42"); "unknown" and "" where the site was not recorded.
func (l Leak) Site() (function, file string) {
	if len(l.Stack) == 0 {
		return "unknown", ""
	}
	f, _ := runtime.CallersFrames(l.Stack).Next()
	return f.Function, filepath.Base(f.File) + ":" + strconv.Itoa(f.Line)
}

// StackString writes the leak's allocation stack on one line, innermost
// first: "main.loadWeights (main.go:42) < main.main (main.go:17)"; empty
// where the site was not recorded.
func (l Leak) StackString() string {
	var b strings.Builder
	frames := runtime.CallersFrames(l.Stack)
	for {
		f, more := frames.Next()
		if f.Function != "" || f.File != "" {
			if b.Len() > 0 {
				b.WriteString(" < ")
			}
			b.WriteString(f.Function + " (" + filepath.Base(f.File) + ":" + strconv.Itoa(f.Line) + ")")
		}
		if !more {
			return b.String()
		}
	}
}

// String describes the leak on one line: "4096 B on cuda:0, allocated at
// main.loadWeights (main.go:42) 1.5s before, unreachable without a free".
func (l Leak) String() string {
	what := ""
	if l.Tracked {
		what = " (tracked)"
	}
	fn, file := l.Site()
	at := fn
	if file != "" {
		at += " (" + file + ")"
	}
	state := "still live"
	if l.Collected {
		state = "unreachable without a free"
		if l.Freed {
			state += ", freed"
		}
	}
	return exactBytes(l.Size) + what + " on " + l.Device.String() + ", allocated at " + at + " " + l.Age.Round(time.Millisecond).String() + " before, " + state
}
