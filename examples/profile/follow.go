package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/memtrack/memtrack"
)

// followOptions are the flags of an elastic cache that follows the device
// (-follow and the flags beside it).
type followOptions struct {
	interval time.Duration    // between two readings
	until    string           // stop once this file exists ("": never)
	limit    time.Duration    // stop after this long (0: never)
	settle   int              // readings without a change after which "settled" is printed
	claims   *memtrack.Claims // the board whose claims the follower counts (-follow-claims); nil for none
}

// runFollow sizes an elastic cache by a budget that follows the device
// (Measurement.Follow with Budget's arguments): it takes a reading,
// reserves address space for the budget's blocks, maps the target, and
// then reads the device every interval, mapping or unmapping block by
// block to each new target, with a line per block. It prints a line
// "settled" once a target has held for o.settle readings, and stops once
// the file o.until exists or o.limit has passed; it then unmaps every
// block under a return check, prints it, and releases the address space.
//
// With o.claims, the follower counts other processes' claims on the board
// (Follower.CountClaims), and a line says so at each reading where what
// they count for changes.
//
// The lines are read by scripts/two-instances-elastic.sh and
// scripts/fit-claim-elastic.sh; each figure is in MiB:
//
//	follow t=SECONDS target=N blocks=N mapped=MiB tracked=MiB used=MiB total=MiB process=MiB others=MiB sharers=N
//
// and, where the follower counts claims, with the reading (counted from
// 1) and what the claims counted for at it, and a line of its own where
// that changes:
//
//	follow t=SECONDS reading=N target=N blocks=N mapped=MiB tracked=MiB used=MiB total=MiB process=MiB others=MiB claimed=MiB sharers=N
//	follow t=SECONDS reading=N claims counted=MiB target=N
func runFollow(dev memtrack.Device, cat memtrack.Category, p memtrack.Measurement, base memtrack.Usage, utilization float64, block int64, o followOptions) {
	g, err := dev.MapGranularity()
	check(err)
	block = (block + g - 1) / g * g // blocks the follower counts are the cache's blocks
	f, err := p.Follow(base, utilization, block)
	check(err)
	if o.claims != nil {
		check(f.CountClaims(o.claims))
	}
	start := time.Now()
	tg, err := f.Read()
	check(err)
	reading := 1
	claimed := int64(0)
	b := tg.Common.Budgets[0]
	// The budget's blocks: the reading's, but for what is in use outside
	// the budget beyond the share the utilization leaves outside it
	// (OverShare), which the cache may get back later. A follower never
	// gives more.
	capacity := max(b.Requested-(b.SetAside-b.OverShare), 0) / block
	c, err := newElasticCache(cat, capacity, block)
	check(err)
	fmt.Printf("elastic KV cache following the device (Measurement.Follow, every %v):\n", o.interval)
	printBudget(b, "weights", "untracked growth since the baseline")
	s := dev.MemoryStats()
	fmt.Printf("  reserved: %s of address space for %d blocks of %s, the budget's (AddressSpace %s)\n",
		size(c.r.Size()), c.capacity(), size(c.block), size(s.AddressSpace))
	target := tg.Blocks
	step := func(blocks int64) {
		fmt.Println(followLine(dev, time.Since(start), reading, target, blocks, c.block, tg, o.claims != nil))
	}
	unchanged := 0
	for {
		target = tg.Blocks
		if n := tg.Common.Budgets[0].Claimed; n != claimed {
			claimed = n
			fmt.Printf("follow t=%.3fs reading=%d claims counted=%s target=%d\n", time.Since(start).Seconds(), reading, mib(n), target)
		}
		if tg.Changed {
			unchanged = 0
			check(c.resize(target, step))
		} else if unchanged++; unchanged == o.settle {
			fmt.Printf("follow t=%.3fs settled blocks=%d\n", time.Since(start).Seconds(), c.blocks)
		}
		if o.until != "" {
			if _, err := os.Stat(o.until); err == nil {
				break
			} else if !errors.Is(err, os.ErrNotExist) {
				check(err)
			}
		}
		if o.limit > 0 && time.Since(start) >= o.limit {
			break
		}
		time.Sleep(o.interval)
		tg, err = f.Read()
		check(err)
		reading++
	}
	fmt.Printf("follow t=%.3fs stopping: unmapping every block\n", time.Since(start).Seconds())
	rc, err := dev.StartReturnCheck()
	check(err)
	target = 0
	check(c.resize(0, step))
	ret, err := rc.End()
	check(err)
	fmt.Printf("  %s", indent(ret.String()))
	check(c.r.Release())
}

// followLine is one step of a following cache: the time since the first
// reading, the target, the blocks mapped and their bytes, the device's
// Tracked, the driver's Used and Total, and its per-process figures (this
// process's and the others'; "-" where the device has none); where claims
// counts claims, the reading too, and what other processes' claims
// counted for at it.
func followLine(dev memtrack.Device, t time.Duration, reading int, target, blocks, block int64, tg memtrack.Target, claims bool) string {
	at, claimed := fmt.Sprintf("t=%.3fs", t.Seconds()), ""
	if claims {
		at += fmt.Sprintf(" reading=%d", reading)
		claimed = " claimed=" + mib(tg.Common.Budgets[0].Claimed)
	}
	u, err := dev.Usage()
	if err != nil {
		return fmt.Sprintf("follow %s target=%d blocks=%d mapped=%s usage unavailable: %v", at, target, blocks, mib(blocks*block), err)
	}
	process, others := "-", "-"
	if u.PerProcess {
		process, others = mib(u.ProcessUsed), mib(u.OtherProcessesUsed)
	}
	return fmt.Sprintf("follow %s target=%d blocks=%d mapped=%s tracked=%s used=%s total=%s process=%s others=%s%s sharers=%d",
		at, target, blocks, mib(blocks*block), mib(u.Tracked), mib(u.Used), mib(u.Total), process, others, claimed, tg.Sharers)
}

// mib formats n bytes in MiB, with two decimals, for lines a script reads.
func mib(n int64) string { return fmt.Sprintf("%.2fMiB", float64(n)/(1<<20)) }
