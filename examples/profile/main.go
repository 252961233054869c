// Command profile shows memtrack's main use end to end: it profiles the peak
// memory of a dummy forward pass of a model on one device, then sizes a
// KV cache from what remains, as an inference server does before it starts:
// by vLLM's formula, and for a device shared with other processes.
//
//	go run ./examples/profile [-device cpu|cuda:N|rocm:N|metal:N] [-utilization 0.9] [-block-size 16MiB]
//	go run ./examples/profile -serve localhost:6060 -linger 1m -trace memtrack.json
//	go run -tags cuda ./examples/profile -device cuda:0 -barrier DIR -instance a -peers 2
//	go run -tags cuda ./examples/profile -device cuda:0,cuda:1
//	go run -tags cuda ./examples/profile -device cuda:0 -graphs
//	go run ./examples/profile -elastic -cache-blocks 8
//	go run -tags cuda ./examples/profile -device cuda:0 -elastic -follow 10ms -follow-until FILE
//	go run -tags cuda ./examples/profile -device cuda:0 -fit [-fit-save FILE | -fit-from FILE] [-claim]
//
// With -barrier, instances started together line up at each step (the
// baseline, the weights, the pass), as serving instances started at once on
// one GPU do (scripts/two-instances.sh runs two); each prints, besides,
// what the driver reported of each process (NVML, rocm_smi) and the budget from the
// device-wide figures beside the one Budget gives.
//
// With several devices, the program runs one pass over all of them, each
// layer's weights and activations split across them as tensor parallelism
// splits them (profileDevices); it prints each device's figures and budget,
// and the blocks every device can hold together, with the device that
// limits them (memtrack.NewCommonBudget).
//
// With -graphs (CUDA), the program captures its decode step in CUDA graphs
// once the pass is measured, one graph per batch size on one stream, as a
// server captures them after profiling: their allocations go through
// memtrack on the capturing stream, and each graph's capture says what it
// needs at a launch (Graphs.Capture) before any is launched. The budget
// sets that memory aside (Measurement.WithGraphs: graphs of one stream
// share the largest need), and once the cache is allocated the program
// launches the graphs and prints what the driver reserved for them beside
// it.
//
// With -elastic (CPU, CUDA), the KV cache is elastic: the program reserves
// address space for every block the budget allows, in the cache's category
// (Category.Reserve), maps -cache-blocks of them one by one
// (Reservation.Map), printing the tracked bytes and the device's figure
// (on the CPU, the process's resident memory) at each, then unmaps half of
// them and shows, with a return check (Device.StartReturnCheck), that the
// driver or the OS has the memory back. elasticCache.resize, which maps or
// unmaps to a number of blocks, is what a budget that follows the device
// drives.
//
// With -elastic and -follow, a budget that follows the device
// (Measurement.Follow) sizes the cache: the program reserves address
// space for the budget's blocks, maps the first reading's target, then
// reads the device at each interval and maps or unmaps, block by block,
// to each new target, printing the blocks, Tracked and the driver's
// figures at each step, until the file of -follow-until exists or
// -follow-for has passed; it then unmaps every block under a return
// check. Two instances on one GPU (scripts/two-instances-elastic.sh) show
// the first shrink when the second starts and grow back when it exits.
//
// With -fit, the program plans the load it is about to make before it
// makes any (memtrack.Plan: the weights, the pass's transient memory, the
// decode step's graphs, the cache's -cache-blocks blocks), prints what
// the driver will count of it and whether it fits beside the other
// processes (Plan.Predict), loads, and checks the prediction against the
// same figure read again (Prediction.Check); its last line is
//
//	fit: device=<device> predicted=<bytes> measured=<bytes> source=<figure>
//
// -fit-save FILE writes the pass's Measurement (WriteMeasurement), and
// -fit-from FILE plans the transient memory and the graphs from one saved
// before (ReadMeasurement), before any pass runs. With -claim, the program
// claims on the board of -claim-dir what its load needs before it loads
// (Prediction.Claim), waits until the device has the room (Claim.Wait),
// and withdraws the claim once loaded; a follower started with
// -follow-claims counts such claims at its readings
// (scripts/fit-claim-elastic.sh runs both).
//
// Sizes take decimal units (kB, MB, GB, TB), binary ones (KiB, MiB, GiB,
// TiB, or Ki, Mi, Gi, Ti) and fractions: 16MB, 1.5GiB, 16Mi.
//
// The forward pass is simulated: the weights are allocated once, then several
// goroutines (the requests of a batch) each allocate and free the
// activations of every layer, the way a framework's allocator is driven.
// The weights, the activations and the KV cache (a few of the blocks the
// budget allows, -cache-blocks) are allocated in categories of their own,
// and the program ends with each category's figures. Its phases, "load
// weights", "measured pass" and "cache", are spans of the history
// (HistoryRecorder.BeginSpan), which the page and the trace draw.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/memtrack/memtrack"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("profile: ")
	var (
		devName     = flag.String("device", "cpu", "device to profile: cpu, cuda:N or metal:N; several, comma-separated (cuda:0,cuda:1), for one pass split across them")
		utilization = flag.Float64("utilization", 0.9, "fraction of the device's memory the server may use, in (0, 1]")
		blockSize   = flag.String("block-size", "16MiB", "size of one KV-cache block: bytes, or a number with a unit (16MiB, 16MB, 1.5GiB, 16Mi)")
		workers     = flag.Int("workers", 4, "requests processed at once in the forward pass")
		layers      = flag.Int("layers", 12, "layers of the model")
		hidden      = flag.String("activation", "4MiB", "activation size of one request in one layer")
		weights     = flag.String("weights", "64MiB", "size of the model's weights")
		serve       = flag.String("serve", "", "serve the page (a timeline of the memory) at http://ADDR/debug/memtrack/ and Prometheus metrics at http://ADDR/metrics while it runs, e.g. localhost:6060")
		traceFile   = flag.String("trace", "", "write the allocation history to this file as a Chrome trace, for Perfetto UI")
		linger      = flag.Duration("linger", 0, "with -serve, keep serving this long once done")
		cacheBlocks = flag.Int64("cache-blocks", 4, "KV-cache blocks to allocate once the cache is sized (at most as many as the budget allows)")
		barrierDir  = flag.String("barrier", "", "line up with the other instances at each step through files in this directory")
		instance    = flag.String("instance", "a", "with -barrier, this instance's name")
		peers       = flag.Int("peers", 2, "with -barrier, how many instances line up")
		graphs      = flag.Bool("graphs", false, "capture the decode step in CUDA graphs once the pass is measured, and set their memory aside in the budget (CUDA)")
		elastic     = flag.Bool("elastic", false, "make the KV cache elastic: reserve address space for the budget's blocks, map -cache-blocks of them one by one, then unmap half and show the memory go back (CPU, CUDA)")
		follow      = flag.Duration("follow", 0, "with -elastic, size the cache by a budget that follows the device, read at this interval (e.g. 10ms), mapping and unmapping blocks to each target")
		followUntil = flag.String("follow-until", "", "with -follow, stop once this file exists")
		followFor   = flag.Duration("follow-for", 0, "with -follow, stop after this long (0: only -follow-until stops it)")
		settle      = flag.Int("follow-settle", 10, "with -follow, print \"settled\" once a target has held for this many readings")
		followClaim = flag.Bool("follow-claims", false, "with -follow, count other processes' claims on the board of -claim-dir as memory in use")
		fitOn       = flag.Bool("fit", false, "plan the load before making it, print what the driver will count of it and whether it fits, load, and check the prediction")
		fitSave     = flag.String("fit-save", "", "write the pass's measurement to this file (JSON), for a later -fit-from")
		fitFrom     = flag.String("fit-from", "", "with -fit, plan the pass's transient memory and graphs from the measurement in this file, before any pass runs")
		fitHeadroom = flag.String("fit-headroom", "0", "with -fit, memory to keep free beside the load (for processes that announce nothing)")
		claimOn     = flag.Bool("claim", false, "with -fit, claim the room the load needs on the board of -claim-dir, wait for it, load, and withdraw the claim")
		claimDir    = flag.String("claim-dir", memtrack.DefaultClaimsDir(), "the directory of the board of claims that the processes sharing a device read")
		claimWait   = flag.Duration("claim-wait", time.Minute, "with -claim, how long to wait for the room")
		claimTTL    = flag.Duration("claim-ttl", time.Minute, "with -claim, how long the claim lasts past its last renewal")
	)
	flag.Parse()
	block, err := parseSize(*blockSize)
	check(err)
	act, err := parseSize(*hidden)
	check(err)
	w, err := parseSize(*weights)
	check(err)
	if *utilization <= 0 || *utilization > 1 {
		log.Fatalf("-utilization %v: want a fraction in (0, 1]", *utilization)
	}
	if *workers < 1 || *layers < 1 {
		log.Fatalf("-workers and -layers must be at least 1")
	}
	if *follow < 0 || *followFor < 0 || *settle < 1 {
		log.Fatalf("-follow and -follow-for must not be negative, -follow-settle at least 1")
	}
	if *follow > 0 && (!*elastic || *followUntil == "" && *followFor == 0) {
		log.Fatalf("-follow takes -elastic, and -follow-until or -follow-for to stop")
	}
	if (*fitFrom != "" || *claimOn || *fitHeadroom != "0") && !*fitOn {
		log.Fatalf("-fit-from, -fit-headroom and -claim take -fit")
	}
	if *fitOn && *follow > 0 {
		log.Fatalf("-fit plans a load made once: it takes no -follow")
	}
	fo := fitOptions{on: *fitOn, claim: *claimOn, claimWait: *claimWait, claimTTL: *claimTTL}
	if *fitHeadroom != "0" {
		fo.headroom, err = parseSize(*fitHeadroom)
		check(err)
	}
	if *fitFrom != "" {
		fo.from = readFitFrom(*fitFrom) // before anything runs
	}
	var board *memtrack.Claims
	if *claimOn || *followClaim {
		board, err = memtrack.OpenClaims(*claimDir)
		check(err)
		fo.board = board
	}
	if names := strings.Split(*devName, ","); len(names) > 1 {
		if *serve != "" || *traceFile != "" || *barrierDir != "" || *graphs || *follow > 0 || *fitSave != "" || *fitFrom != "" || *claimOn {
			log.Fatalf("-serve, -trace, -barrier, -graphs, -follow, -fit-save, -fit-from and -claim take one -device")
		}
		profileDevices(names, *utilization, block, *workers, *layers, act, w, *cacheBlocks, fo)
		return
	}
	dev, err := memtrack.ParseDevice(*devName)
	check(err)
	stopView := startView(dev, *serve, *traceFile, *linger)
	defer stopView()
	weightsCat, kvCache, activations := categories(dev)
	line := barrier{dir: *barrierDir, name: *instance, peers: *peers}

	// The baseline, before anything of the instance is on the device.
	base, err := dev.Baseline()
	check(err)
	line.wait("baseline")

	// With -fit, the load is planned before any of it is made. The decode
	// step's graphs are captured first where the plan takes their need
	// from their captures: a capture reserves nothing.
	var decode *decodeGraphs
	var fit *fitRun
	if *fitOn {
		load := fitLoad{weights: w, cacheVia: memtrack.ViaAlloc, block: block, cacheBlocks: *cacheBlocks, blockSize: block}
		load.transient, load.transientOf = passBound(*workers, act)
		if *graphs && fo.from == nil {
			decode, err = captureDecode(dev, activations, *workers, *layers, act)
			check(err)
			defer decode.close()
			m, err := memtrack.Measurement{Device: dev}.WithGraphs(decode.captures...)
			check(err)
			load.graphNeed = m.GraphNeed
		}
		if *elastic {
			load.cacheVia, load.block = memtrack.ViaMap, mappedBlock(dev, block)
		}
		fit = planFit(dev, fo, load)
	}

	// The weights stay allocated for the server's lifetime.
	load, err := dev.History().BeginSpan("load weights") // a phase on the timeline, where a history is recorded
	check(err)
	weightBuf, err := weightsCat.Alloc(w)
	check(err)
	defer weightBuf.Free()
	touch(weightBuf) // loading writes them, so that they are resident as real weights are
	check(load.End())
	line.wait("weights")

	// Measure one forward pass: the peak measures only what it adds.
	pass, err := dev.History().BeginSpan("measured pass")
	check(err)
	p, err := dev.Measure(func() error { return forwardPass(activations, *workers, *layers, act) })
	check(err)
	check(pass.End())
	line.wait("measured")

	printMeasurement(base, p, *workers, *layers, act)

	// The decode step's graphs, captured after the pass and before the
	// cache is sized: capture reserves nothing, and each capture says what
	// its graph will need.
	if *graphs {
		if decode == nil {
			decode, err = captureDecode(dev, activations, *workers, *layers, act)
			check(err)
			defer decode.close()
		}
		decode.print()
		p, err = p.WithGraphs(decode.captures...) // one call: the graphs of one stream
		check(err)
	}
	if *fitSave != "" {
		saveFit(*fitSave, p)
	}

	if *follow > 0 {
		cacheSpan, err := dev.History().BeginSpan("cache")
		check(err)
		fopts := followOptions{interval: *follow, until: *followUntil, limit: *followFor, settle: *settle}
		if *followClaim {
			fopts.claims = board
		}
		runFollow(dev, kvCache, p, base, *utilization, block, fopts)
		check(cacheSpan.End())
		stopView()
		return
	}
	blocks, vllmBlocks := int64(0), int64(0)
	fmt.Printf("KV cache by vLLM's formula (Measurement.Budget):\n")
	b, err := p.Budget(base, *utilization, block)
	wholeBase, whole := deviceWide(base, p)
	wb, werr := whole.Budget(wholeBase, *utilization, block)
	if err != nil {
		if !errors.Is(err, memtrack.ErrOutOfMemory) {
			log.Fatal(err)
		}
		fmt.Printf("  refused, as vLLM refuses to start: %v\n", err)
	} else {
		printBudget(b, "weights", "untracked growth since the baseline")
		blocks += b.Blocks
		vllmBlocks = b.Blocks
		if b.PerProcess && werr == nil {
			fmt.Printf("  from the device-wide figures instead: %s untracked growth, %d blocks\n", size(wb.UntrackedIncrease), wb.Blocks)
		}
	}
	if line.dir != "" {
		fmt.Println(budgetLine(*instance, b, wb, err, werr)) // for scripts/two-instances.sh
	}
	fmt.Printf("KV cache on a shared device (Measurement.SharedBudget):\n")
	b, err = p.SharedBudget(*utilization, block)
	check(err)
	printBudget(b, "used before the pass", "untracked growth in the pass")
	blocks += b.Blocks
	// The cache holds as many blocks as the budgets allow, up to
	// -cache-blocks; with -fit, the plan's -cache-blocks, which the
	// prediction said fit.
	cacheN := min(*cacheBlocks, max(vllmBlocks, b.Blocks))
	if fit != nil {
		cacheN = *cacheBlocks
	} else if blocks == 0 {
		os.Exit(1)
	}
	cacheSpan, err := dev.History().BeginSpan("cache")
	check(err)
	if *elastic {
		c := mapElastic(dev, kvCache, max(vllmBlocks, b.Blocks, cacheN), cacheN, block)
		check(cacheSpan.End())
		if decode != nil {
			launchDecode(dev, decode, b.GraphReserved)
		}
		if fit != nil {
			fit.done()
		}
		c.shrink(dev)
		printCategories(dev)
		check(c.close())
		stopView()
		if fit != nil {
			fit.printCheck()
			fmt.Println(fitLine([]*fitRun{fit}))
		}
		return
	}
	cache, err := allocCache(kvCache, cacheN, block)
	check(err)
	check(cacheSpan.End())
	defer freeAll(cache)
	if decode != nil {
		launchDecode(dev, decode, b.GraphReserved)
	}
	if fit != nil {
		fit.done()
	}
	printCategories(dev)
	// The page lingers, and the trace ends, with the weights and the cache
	// still allocated, so that they show the split.
	stopView()
	if fit != nil {
		fit.printCheck()
		fmt.Println(fitLine([]*fitRun{fit}))
	}
}

// launchDecode launches the decode step's graphs once the cache is
// allocated, as a server's first steps do, and prints what the driver
// reserved for them beside what the budget set aside.
func launchDecode(dev memtrack.Device, decode *decodeGraphs, setAside int64) {
	before, err := dev.Graphs().Stats()
	check(err)
	check(decode.launch())
	after, err := dev.Graphs().Stats()
	check(err)
	fmt.Printf("CUDA graphs launched, one after another on one stream:\n")
	fmt.Printf("  graph reserved: %s (the driver's GraphReserved grew %s); the budget set aside %s\n",
		size(after.GraphReserved), size(after.GraphReserved-before.GraphReserved), size(setAside))
}

// printMeasurement writes the device's figures, from the baseline to the
// end of the measured pass of workers requests through layers layers with
// activations of act.
//
// Each figure is named once, for what it is (docs/glossary.md). "Tracked"
// is what memtrack counts (buffers allocated through it); "used" is what
// the OS or driver reports (on the CPU, this process's resident memory, or
// its cgroup's usage); "untracked" is their difference.
func printMeasurement(base memtrack.Usage, p memtrack.Measurement, workers, layers int, act int64) {
	fmt.Printf("device %v: %s total\n", p.Device, size(p.Total))
	fmt.Printf("  baseline (before the weights): %s used, %s free, %s tracked\n", size(base.Used), size(base.Free), size(base.Tracked))
	wm, _ := p.Category(memtrack.CategoryWeights)
	fmt.Printf("  weights (tracked):             %s\n", size(wm.StartTracked))
	fmt.Printf("forward pass: %d requests x %d layers, activations of %s\n", workers, layers, size(act))
	fmt.Printf("  peak tracked:                  %s, %s above the tracked bytes before the pass\n", size(p.PeakTracked), size(p.PeakTrackedIncrease))
	am, _ := p.Category(memtrack.CategoryActivations)
	fmt.Printf("  activations' peak tracked:     %s, while the weights held %s\n", size(am.PeakTracked), size(wm.PeakTracked))
	fmt.Printf("  used before / after:           %s / %s\n", size(p.StartUsed), size(p.EndUsed))
	fmt.Printf("  untracked growth in the pass:  %s (used grew %s, tracked bytes %s)\n", size(p.Untracked), size(p.UsedIncrease), size(p.EndTracked-p.StartTracked))
	printProcesses(base, p)
}

// printBudget writes how a budget was reached; held and grown name its
// Weights or StartUsed and its UntrackedIncrease, which the two formulas
// measure differently.
func printBudget(b memtrack.Budget, held, grown string) {
	fmt.Printf("  requested: %.2f x total = %s\n", b.Utilization, size(b.Requested))
	other := ""
	if b.OtherTracked != 0 {
		other = " + " + size(b.OtherTracked) + " other tracked"
	}
	if b.OtherProcessesUsed != 0 {
		other += " + " + size(b.OtherProcessesUsed) + " of other processes"
	}
	graphs := ""
	if b.GraphReserved != 0 {
		graphs = " + " + size(b.GraphReserved) + " CUDA graphs"
	}
	if b.OverShare != 0 { // a follower's reading: what is in use outside the budget beyond the share left to it
		graphs += " + " + size(b.OverShare) + " in use outside the budget beyond its share"
	}
	fmt.Printf("  set aside: %s = %s %s%s + %s peak tracked increase + %s %s%s\n",
		size(b.SetAside), size(b.Weights+b.StartUsed), held, other, size(b.PeakIncrease), size(b.UntrackedIncrease), grown, graphs)
	if b.PerProcess {
		fmt.Printf("  figures:   per process (%s)\n", processSource(b.Device))
	} else if b.PerProcessErr != nil {
		fmt.Printf("  figures:   device-wide: %v\n", b.PerProcessErr)
	}
	fmt.Printf("  cache:     %s, %d blocks of %s\n", size(b.Available), b.Blocks, size(b.BlockSize))
}

// forwardPass runs workers requests through layers layers at once, with
// their activations in the category dev. Each layer
// allocates its output, and frees its input once the output exists; the
// residual stream stays live for the whole pass, as in a transformer.
func forwardPass(dev memtrack.Category, workers, layers int, act int64) error {
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := request(dev, layers, act); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func request(dev memtrack.Category, layers int, act int64) error {
	residual, err := dev.Alloc(act)
	if err != nil {
		return err
	}
	defer residual.Free()
	in, err := dev.Alloc(act)
	if err != nil {
		return err
	}
	for range layers {
		// Attention scores and the MLP's wider hidden state, then the output.
		scratch, err := dev.Alloc(4 * act)
		if err != nil {
			in.Free()
			return err
		}
		touch(scratch)
		out, err := dev.Alloc(act)
		if err != nil {
			scratch.Free()
			in.Free()
			return err
		}
		touch(out)
		if err := scratch.Free(); err != nil {
			return err
		}
		if err := in.Free(); err != nil {
			return err
		}
		in = out
	}
	return in.Free()
}

// touch writes one byte per page of host-visible memory, as a kernel would.
func touch(b *memtrack.Buffer) {
	p := b.Bytes()
	for i := 0; i < len(p); i += 4096 {
		p[i] = 1
	}
}

func size(n int64) string {
	if n < 0 { // a not-tracked growth, where others freed memory meanwhile
		return "-" + size(-n)
	}
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.2f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
