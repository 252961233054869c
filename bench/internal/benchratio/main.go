// Command benchratio reads benchstat's CSV output (benchstat -format csv) for
// the bench suite and prints, as a Markdown table, each benchmark's median
// time per operation with its confidence interval, its allocations, and its
// ratios: against the baseline designs of its group (-base), against its
// peer design (-peer), and against its own run at -cpu 1. It then states
// whether each of the suite's ratios is within its bound, with the measured ratio.
//
// With -raw, it also reads the raw go test output that benchstat summarised,
// run as rounds (scripts/bench.sh runs every benchmark once per round, N
// rounds), and gives beside each ratio of benchstat's medians the median of
// the per-round ratios: the two designs measured moments apart, so that
// drift in the machine's load cancels out. The targets are judged on the
// per-round median where there is one.
//
// A benchmark name is read as GROUP/design=DESIGN-PROCS: the rows of one
// group and one PROCS are compared with each other.
package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	base := flag.String("base", "atomic,mutexmap", "comma-separated designs every row is compared with, where its group has them")
	peer := flag.String("peer", "Counter=mutexdev,Record=mutexrecord,packed=Counter,tracked=untracked",
		"comma-separated DESIGN=PEER pairs: a row of DESIGN (or DESIGN-suffix) is compared with PEER (or PEER-suffix, where it exists)")
	raw := flag.String("raw", "", "the raw go test -bench output, in rounds, for the medians of the per-round ratios")
	flag.Parse()
	res, err := parse(os.Stdin)
	if err == nil && len(res.rows) == 0 {
		err = errors.New("no benchmark rows in the input")
	}
	if err == nil && *raw != "" {
		res.rounds, err = readRounds(*raw)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchratio:", err)
		os.Exit(1)
	}
	res.table(os.Stdout, strings.Split(*base, ","), pairs(*peer))
	fmt.Println()
	res.targets(os.Stdout)
}

// key names one benchmark row.
type key struct {
	group, design string
	procs         int
}

// row is one benchmark's figures.
type row struct {
	key
	sec    float64 // median seconds per operation
	ci     string  // benchstat's confidence interval of sec
	allocs float64 // median allocations per operation; -1 if not reported
}

type results struct {
	rows   []*row // in the order the table prints them
	index  map[key]*row
	rounds rounds // nil without -raw
}

func readRounds(name string) (rounds, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseRounds(f)
}

// parseName splits "GROUP/design=DESIGN-PROCS"; PROCS is 1 when absent.
func parseName(name string) (key, error) {
	procs := 1
	if i := strings.LastIndexByte(name, '-'); i >= 0 {
		if n, err := strconv.Atoi(name[i+1:]); err == nil {
			name, procs = name[:i], n
		}
	}
	group, design, ok := strings.Cut(name, "/design=")
	if !ok {
		return key{}, fmt.Errorf("benchmark %q has no /design= part", name)
	}
	return key{group, design, procs}, nil
}

// parse reads benchstat's CSV: tables separated by blank lines, each with a
// header row naming the file, a row naming the unit, then one row per
// benchmark (name, value, CI) and a geomean row.
func parse(in io.Reader) (*results, error) {
	r := csv.NewReader(in)
	r.FieldsPerRecord = -1
	res := &results{index: map[key]*row{}}
	unit := ""
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		switch {
		case len(rec) < 2 || rec[0] == "geomean":
		case rec[0] == "" && len(rec) >= 3 && rec[2] == "CI":
			unit = rec[1]
		case rec[0] == "":
		case unit == "sec/op" || unit == "allocs/op":
			if err := res.add(unit, rec); err != nil {
				return nil, err
			}
		}
	}
	res.sort()
	return res, nil
}

func (res *results) add(unit string, rec []string) error {
	k, err := parseName(rec[0])
	if err != nil {
		return err
	}
	v, err := strconv.ParseFloat(rec[1], 64)
	if err != nil {
		return fmt.Errorf("%s: %s %q: %w", rec[0], unit, rec[1], err)
	}
	r := res.index[k]
	if r == nil {
		r = &row{key: k, allocs: -1}
		res.index[k] = r
		res.rows = append(res.rows, r)
	}
	if unit == "allocs/op" {
		r.allocs = v
		return nil
	}
	r.sec = v
	if len(rec) > 2 {
		r.ci = rec[2]
	}
	return nil
}

// sort orders the rows by group (first appearance), then procs, keeping
// the order of appearance of the designs.
func (res *results) sort() {
	first := map[string]int{}
	for i, r := range res.rows {
		if _, ok := first[r.group]; !ok {
			first[r.group] = i
		}
	}
	slices.SortStableFunc(res.rows, func(a, b *row) int {
		if c := first[a.group] - first[b.group]; c != 0 {
			return c
		}
		return a.procs - b.procs
	})
}

// pairs parses "A=B,C=D".
func pairs(s string) map[string]string {
	m := map[string]string{}
	for _, p := range strings.Split(s, ",") {
		if a, b, ok := strings.Cut(p, "="); ok {
			m[a] = b
		}
	}
	return m
}

// peerOf returns the row r is compared with: for design X-suffix with rule
// X=Y, the row Y-suffix if it exists, else Y.
func (res *results) peerOf(r *row, peers map[string]string) *row {
	prefix, suffix, _ := strings.Cut(r.design, "-")
	p, ok := peers[prefix]
	if !ok {
		return nil
	}
	if suffix != "" {
		if q := res.index[key{r.group, p + "-" + suffix, r.procs}]; q != nil {
			return q
		}
	}
	return res.index[key{r.group, p, r.procs}]
}

// ratio formats a/b, or "" where b is missing or is a itself: the ratio of
// benchstat's medians, then, where there are rounds, the median of the
// per-round ratios in parentheses.
func (res *results) ratio(a, b *row) string {
	if b == nil || a == b || b.sec == 0 {
		return ""
	}
	s := fmt.Sprintf("%.2fx", a.sec/b.sec)
	if q, n := res.rounds.ratio(a.key, b.key); n > 0 {
		s += fmt.Sprintf(" (%.2fx)", q)
	}
	return s
}

func (res *results) table(w io.Writer, bases []string, peers map[string]string) {
	fmt.Fprint(w, "| benchmark | cpu | design | time/op | ± | allocs/op |")
	for _, b := range bases {
		fmt.Fprintf(w, " vs %s |", b)
	}
	fmt.Fprintln(w, " vs peer | vs -cpu 1 |")
	fmt.Fprint(w, "|---|--:|---|--:|--:|--:|")
	fmt.Fprintln(w, strings.Repeat("--:|", len(bases)+2))
	for _, r := range res.rows {
		allocs := ""
		if r.allocs >= 0 {
			allocs = strconv.FormatFloat(r.allocs, 'g', -1, 64)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s |", r.group, r.procs, r.design, duration(r.sec), r.ci, allocs)
		for _, b := range bases {
			fmt.Fprintf(w, " %s |", res.ratio(r, res.index[key{r.group, b, r.procs}]))
		}
		peer := res.ratio(r, res.peerOf(r, peers))
		if p := res.peerOf(r, peers); p != nil && peer != "" {
			peer += " " + p.design
		}
		fmt.Fprintf(w, " %s | %s |\n", peer, res.ratio(r, res.index[key{r.group, r.design, 1}]))
	}
}

// duration formats seconds with a unit that keeps three or four digits.
func duration(sec float64) string {
	for _, u := range []struct {
		name  string
		scale float64
	}{{"ns", 1e-9}, {"µs", 1e-6}, {"ms", 1e-3}} {
		if v := sec / u.scale; v < 1000 {
			return strconv.FormatFloat(v, 'f', 3-digits(v), 64) + " " + u.name
		}
	}
	return strconv.FormatFloat(sec, 'f', 3, 64) + " s"
}

func digits(v float64) int {
	switch {
	case v >= 100:
		return 3
	case v >= 10:
		return 2
	}
	return 1
}
