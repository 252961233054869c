package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/memtrack/memtrack"
)

// fitOptions are the flags of a load planned before it is made (-fit and
// the flags beside it).
type fitOptions struct {
	on        bool                  // -fit: plan, predict, load, check
	from      *memtrack.Measurement // -fit-from: the transient memory and the graphs of a saved pass
	headroom  int64                 // -fit-headroom
	claim     bool                  // -claim: claim the room and wait for it
	board     *memtrack.Claims      // -claim-dir's board, with -claim
	claimWait time.Duration         // -claim-wait
	claimTTL  time.Duration         // -claim-ttl
}

// readFitFrom reads the Measurement of -fit-from, before anything runs.
func readFitFrom(path string) *memtrack.Measurement {
	f, err := os.Open(path)
	check(err)
	defer f.Close()
	m, err := memtrack.ReadMeasurement(f)
	if err != nil {
		log.Fatalf("-fit-from %s: %v", path, err)
	}
	return &m
}

// saveFit writes the pass's Measurement to path (-fit-save).
func saveFit(path string, m memtrack.Measurement) {
	f, err := os.Create(path)
	check(err)
	check(memtrack.WriteMeasurement(f, m))
	check(f.Close())
	fmt.Printf("fit: the pass's measurement written to %s (WriteMeasurement)\n", path)
}

// fitRun is one device's load, planned before it is made: its prediction,
// the claim of its room (-claim), and its check once it is made.
type fitRun struct {
	pred  memtrack.Prediction
	claim *memtrack.Claim
	chk   memtrack.FitCheck
	why   string // what the transient memory's figure is
}

// fitLoad is what the main job is about to load on one device.
type fitLoad struct {
	weights     int64
	transient   int64  // the pass's transient memory at its peak
	transientOf string // where that figure comes from
	graphNeed   int64
	cacheVia    memtrack.Via
	block       int64 // one block of the cache, as it is allocated (a mapped one in whole granules)
	cacheBlocks int64
	blockSize   int64 // the -block-size, for the blocks that would fit
}

// planFit plans the load on dev, predicts it and prints the prediction;
// with -claim it claims the room the load needs and waits for it, printing
// each step. A plan refused, or a wait past -claim-wait, ends the program.
func planFit(dev memtrack.Device, o fitOptions, l fitLoad) *fitRun {
	plan := memtrack.Plan{Device: dev, Parts: []memtrack.PlanPart{
		{Category: memtrack.CategoryWeights, Via: memtrack.ViaAlloc, Size: l.weights, Count: 1},
	}, Transient: l.transient, GraphNeed: l.graphNeed, Headroom: o.headroom, BlockSize: l.blockSize}
	if l.cacheBlocks > 0 {
		plan.Parts = append(plan.Parts, memtrack.PlanPart{Category: memtrack.CategoryKVCache, Via: l.cacheVia, Size: l.block, Count: l.cacheBlocks})
	}
	why := l.transientOf
	if o.from != nil {
		var err error
		plan, err = plan.WithMeasurement(*o.from)
		if err != nil {
			log.Fatalf("-fit-from: %v", err)
		}
		why = fmt.Sprintf("the saved pass's on %v (-fit-from)", o.from.Device)
	}
	if o.claim {
		plan.Claims = o.board
	}
	p, err := plan.Predict()
	check(err)
	r := &fitRun{pred: p, why: why}
	r.printPrediction()
	if !o.claim {
		if !p.Fits {
			fmt.Printf("fit: not loaded: the load does not fit on %v, and the program claims no room (-claim)\n", dev)
			os.Exit(1)
		}
		return r
	}
	r.claim, err = p.Claim(o.claimTTL)
	check(err)
	fmt.Printf("claim: %d bytes (%s) on %v (Prediction.Claim: what the load takes at its most, with the headroom) in %s, expiring %v after each renewal\n",
		r.claim.Bytes(), size(r.claim.Bytes()), dev, o.board.Dir(), o.claimTTL)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), o.claimWait)
	defer cancel()
	p, err = r.claim.Wait(ctx, 10*time.Millisecond)
	if err != nil {
		r.claim.Withdraw()
		log.Fatalf("-claim: %v", err)
	}
	r.pred = p
	fmt.Printf("room: after %.3fs, %s free, %s claimed before this claim: the load fits (Claim.Wait)\n",
		time.Since(start).Seconds(), size(p.Free), size(p.Claimed))
	return r
}

// printPrediction writes the prediction.
func (r *fitRun) printPrediction() {
	p := r.pred
	fmt.Printf("fit: the load planned on %v (Plan.Predict), as its driver counts it:\n", p.Plan.Device)
	rules := fmt.Sprintf("allocations in units of %s, as the device gives them", size(p.AllocUnit))
	if p.AllocUnit == 1 {
		rules = "allocations as asked (the driver states no rounding)"
	}
	if p.Granularity > 0 {
		rules += fmt.Sprintf(", mappings in granules of %s", size(p.Granularity))
	}
	if p.PoolChunk > 0 {
		rules += fmt.Sprintf(", the memory pool in chunks of %s", size(p.PoolChunk))
	}
	fmt.Printf("  rules:     %s\n", rules)
	for _, part := range p.Parts {
		fmt.Printf("  %-10s %d x %s by %s: %s\n", part.Category, part.Count, size(part.Size), part.Via, size(part.Predicted))
	}
	if p.Plan.GraphNeed > 0 {
		fmt.Printf("  graphs:    need %s at their launch: %s more reserved\n", size(p.Plan.GraphNeed), size(p.GraphReservedIncrease))
	}
	if p.Plan.Transient > 0 {
		fmt.Printf("  transient: %s at the pass's peak (%s): %s\n", size(p.Plan.Transient), r.why, size(p.Transient))
	}
	if p.PerProcess {
		fmt.Printf("  before:    %s of this process's memory (%s): its context, and what it holds before the load\n", size(p.Before), p.Source)
	}
	fmt.Printf("  predicted: %s more of this process's memory (%s), %s at the most\n", size(p.Predicted), sourceName(p), size(p.Need))
	fmt.Printf("  device:    %s total, %s free, %s claimed by other processes, a headroom of %s\n",
		size(p.Total), size(p.Free), size(p.Claimed), size(p.Plan.Headroom))
	if p.Fits {
		fmt.Printf("  fits:      yes, with %s to spare; %d blocks of %s would fit beside the rest of the load\n", size(p.Room), p.Blocks, size(p.Plan.BlockSize))
	} else {
		fmt.Printf("  fits:      does not fit: %s short; %d blocks of %s would fit beside the rest of the load\n", size(-p.Room), p.Blocks, size(p.Plan.BlockSize))
	}
}

// sourceName says what a prediction's figure is.
func sourceName(p memtrack.Prediction) string {
	switch p.Source {
	case memtrack.SourceNVML, memtrack.SourceROCmSMI:
		return "its figure of this process, " + p.Source
	case memtrack.SourceOS:
		return "the OS's figure of this process"
	case memtrack.SourceUnchecked:
		return "no figure of this process: the device's, and no check"
	}
	return "the device's used memory, " + p.Source + ", which every process moves"
}

// done reads the check once the load is made, and withdraws the claim.
func (r *fitRun) done() {
	var err error
	r.chk, err = r.pred.Check()
	if err != nil {
		fmt.Printf("fit check: %v\n", err)
	}
	if r.claim != nil {
		check(r.claim.Withdraw())
		fmt.Printf("claim: withdrawn (Claim.Withdraw), the load in use\n")
	}
}

// printCheck writes the check and its last line.
func (r *fitRun) printCheck() {
	c, p := r.chk, r.pred
	if p.Source == memtrack.SourceUnchecked {
		fmt.Printf("fit check on %v: none: the device gives no figure of this process\n", p.Plan.Device)
		return
	}
	fmt.Printf("fit check on %v (Prediction.Check), after the load:\n", p.Plan.Device)
	fmt.Printf("  measured:  %s more (%s: %s -> %s), %s predicted: a difference of %s\n",
		size(c.Measured), p.Source, size(p.Before), size(c.After), size(p.Predicted), size(c.Difference))
	if p.PoolReservedIncrease != 0 || c.PoolReservedIncrease != 0 {
		fmt.Printf("  pool:      %s more reserved, %s predicted\n", size(c.PoolReservedIncrease), size(p.PoolReservedIncrease))
	}
	if p.Plan.GraphNeed > 0 {
		fmt.Printf("  graphs:    %s more reserved, %s predicted\n", size(c.GraphReservedIncrease), size(p.GraphReservedIncrease))
	}
	for _, cf := range c.Categories {
		fmt.Printf("  %-10s planned %s, tracked %s more\n", cf.Category, size(cf.Planned), size(cf.TrackedIncrease))
	}
	for _, w := range c.Why {
		fmt.Printf("  why: %s\n", w)
	}
}

// fitLine is the main job's last line with -fit: the devices, what was
// predicted and measured (summed over them), and the figure's source.
func fitLine(runs []*fitRun) string {
	var devs []string
	var predicted, measured int64
	source := ""
	for _, r := range runs {
		devs = append(devs, r.pred.Plan.Device.String())
		predicted += r.pred.Predicted
		measured += r.chk.Measured
		if source == "" || source == r.pred.Source {
			source = r.pred.Source
		} else {
			source = "mixed"
		}
	}
	return fmt.Sprintf("fit: device=%s predicted=%d measured=%d source=%s", strings.Join(devs, ","), predicted, measured, source)
}

// passBound is the transient memory the pass takes at most, from its
// shape: each request holds its residual stream, its layer's input, the
// layer's scratch (4 activations) and its output at once, 7 activations,
// and all requests may be at their peak together.
func passBound(workers int, act int64) (int64, string) {
	return int64(workers) * 7 * act, fmt.Sprintf("at most %d requests x 7 activations of %s", workers, size(act))
}
