package main

import (
	"fmt"
	"io"
)

// target is one of the suite's bounds: the time ratio of two rows against
// a bound it should stay within.
type target struct {
	what     string
	num, den key // procs 0 stands for the one run of a serial benchmark
	bound    float64
	atLeast  bool // within if the ratio is >= bound; else if it is <= bound
}

// targets lists the bounds the suite's ratios are checked against: the
// physical limits first, then the first design's.
func targets() []target {
	serial := func(design string) key { return key{"Serial/op=pair", design, 0} }
	par := func(load, design string, procs int) key {
		return key{"Parallel/load=" + load, design, procs}
	}
	dev := func(size, design string) key { return key{"Device/size=" + size, design, 0} }
	ts := []target{
		{"Counter pair <= 1.05x the raw atomic pair, one goroutine", serial("Counter"), serial("atomic"), 1.05, false},
	}
	for _, p := range []int{2, 4, 8} {
		ts = append(ts, target{fmt.Sprintf("Counter no slower than the raw pair plus the peak check, %s on one device", goroutines(p)),
			par("one", "Counter", p), par("one", "atomicpeak", p), 1, false})
	}
	ts = append(ts,
		target{"Record pair <= 1.10x a raw pair with as many adds (2 on Alloc, 3 on Free), one goroutine",
			serial("Record"), serial("atomic5"), 1.10, false},
		target{"Record pair no slower than the mutex record, one goroutine", serial("Record"), serial("mutexrecord"), 1, false})
	for _, p := range []int{1, 2, 4, 8} {
		ts = append(ts, target{fmt.Sprintf("Record no slower than the mutex record, %s on one device", goroutines(p)),
			par("one", "Record", p), par("one", "mutexrecord", p), 1, false})
	}
	ts = append(ts,
		target{"CPU Alloc+Free of 64 B at most 3x a bare make", dev("64B", "tracked"), dev("64B", "untracked"), 3, false},
		target{"Counter pair within 1.3x of the raw atomic pair", serial("Counter"), serial("atomic"), 1.3, false},
		target{"Counter pair at least 4x faster than mutex+map, one goroutine", serial("Counter"), serial("mutexmap"), 0.25, false},
	)
	for _, p := range []int{1, 2, 4, 8} {
		ts = append(ts, target{fmt.Sprintf("Counter at least 4x faster than mutex+map, %s on different devices", goroutines(p)),
			par("spread", "Counter", p), par("spread", "mutexmap", p), 0.25, false})
	}
	ts = append(ts,
		target{"Counter on different devices scales: time/op at 2 CPUs vs 1 (1.6x the throughput or more)",
			par("spread", "Counter", 2), par("spread", "Counter", 1), 1 / 1.6, false},
		target{"unpadded variant on different devices does not scale: time/op at 2 CPUs vs 1",
			par("spread", "packed", 2), par("spread", "packed", 1), 1 / 1.6, true},
	)
	for _, p := range []int{2, 4, 8} {
		ts = append(ts, target{fmt.Sprintf("Counter no slower than a per-device mutex, %s on one device", goroutines(p)),
			par("one", "Counter", p), par("one", "mutexdev", p), 1, false})
	}
	return append(ts,
		target{"CPU Alloc+Free 4 KiB: tracking overhead at most 10%", dev("4KiB", "tracked"), dev("4KiB", "untracked"), 1.10, false},
		target{"CPU Alloc+Free 1 MiB: tracking overhead at most 1%", dev("1MiB", "tracked"), dev("1MiB", "untracked"), 1.01, false},
		target{"CPU Alloc+Free 64 MiB: tracking overhead at most 1%", dev("64MiB", "tracked"), dev("64MiB", "untracked"), 1.01, false},
	)
}

func goroutines(n int) string {
	if n == 1 {
		return "1 goroutine"
	}
	return fmt.Sprintf("%d goroutines", n)
}

// lookup finds the row of k; procs 0 matches any.
func (res *results) lookup(k key) *row {
	if k.procs != 0 {
		return res.index[k]
	}
	for _, r := range res.rows {
		if r.group == k.group && r.design == k.design {
			return r
		}
	}
	return nil
}

// targets prints whether each ratio is within its bound, with the ratio of
// benchstat's medians and, where there are rounds, the median of the
// per-round ratios, which then decides.
func (res *results) targets(w io.Writer) {
	fmt.Fprintln(w, "| ratio | ratio of medians | median of rounds | bound | |")
	fmt.Fprintln(w, "|---|--:|--:|--:|---|")
	for _, t := range targets() {
		num, den := res.lookup(t.num), res.lookup(t.den)
		op := "<="
		if t.atLeast {
			op = ">="
		}
		if num == nil || den == nil || den.sec == 0 {
			fmt.Fprintf(w, "| %s | | | %s %.3g | not measured |\n", t.what, op, t.bound)
			continue
		}
		q := num.sec / den.sec
		rounds := ""
		if m, n := res.rounds.ratio(num.key, den.key); n > 0 {
			q = m
			rounds = fmt.Sprintf("%.3fx (%d)", m, n)
		}
		verdict := "beyond"
		if (t.atLeast && q >= t.bound) || (!t.atLeast && q <= t.bound) {
			verdict = "within"
		}
		fmt.Fprintf(w, "| %s | %.3fx | %s | %s %.3g | %s |\n", t.what, num.sec/den.sec, rounds, op, t.bound, verdict)
	}
}
