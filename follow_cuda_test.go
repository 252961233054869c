//go:build cuda

package memtrack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Followers in real OS processes sharing one fake GPU (the fake driver's
// machine file, which the fake NVML reads), each this test binary run as
// TestFollowChild and driven by commands on its stdin, as the NVML tests'
// children are. Each child's cache is a list of buffers of one block,
// which it resizes to each target.

// followView is what a child answers.
type followView struct {
	Err        string `json:"err,omitempty"`
	Blocks     int64  `json:"blocks"`     // Target.Blocks, which the child's cache now holds
	Want       int64  `json:"want"`       // Target.Common.Blocks
	Budget     int64  `json:"budget"`     // the Blocks of Budget with the same arguments
	OverShare  int64  `json:"overShare"`  // Target.Common.Budgets[0].OverShare
	Sharers    int    `json:"sharers"`    // Target.Sharers
	Changed    bool   `json:"changed"`    // Target.Changed
	PerProcess bool   `json:"perProcess"` // Target.PerProcess
	PerErr     string `json:"perErr,omitempty"`
	Used       int64  `json:"used"` // the device's, after the resize
	Total      int64  `json:"total"`
	Claimed    int64  `json:"claimed"` // Target.Common.Budgets[0].Claimed; a newcomer's claim's bytes
}

type followChild struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startFollowChild(t *testing.T, machine string, env ...string) *followChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFollowChild$", "-test.count=1")
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), "MEMTRACK_FOLLOW_CHILD=1", "GORACE="+gorace, "FAKECUDA_MACHINE="+machine)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &followChild{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(c.stop)
	return c
}

// do sends a command and returns the answer, failing on an error.
func (c *followChild) do(format string, args ...any) followView {
	c.t.Helper()
	_, err := fmt.Fprintf(c.in, format+"\n", args...)
	require.NoError(c.t, err)
	for c.out.Scan() {
		if rest, ok := strings.CutPrefix(c.out.Text(), "followchild: "); ok {
			var v followView
			require.NoError(c.t, json.Unmarshal([]byte(rest), &v), "%s", rest)
			require.Empty(c.t, v.Err, "%s", fmt.Sprintf(format, args...))
			require.LessOrEqual(c.t, v.Used, v.Total, "the device is never over-full")
			return v
		}
	}
	c.t.Fatalf("child ended before answering %q: %v", fmt.Sprintf(format, args...), c.out.Err())
	return followView{}
}

// stop ends the child (closing its stdin: it exits, and the driver frees
// its memory) and waits for it.
func (c *followChild) stop() {
	if c.in != nil {
		c.in.Close()
		c.in = nil
		c.cmd.Wait()
	}
}

// TestFollowChild is a child of the tests below.
func TestFollowChild(t *testing.T) {
	if os.Getenv("MEMTRACK_FOLLOW_CHILD") != "1" {
		t.Skip("run by the follower's tests in a process of its own")
	}
	d := cudaDevices(t, 1)[0]
	var (
		f       *Follower
		base    Usage
		based   bool // base was taken before the weights
		budget  Budget
		cache   []*Buffer
		weights []*Buffer
		block   int64
		changes chan Target
		cancel  context.CancelFunc
		done    chan error
		claim   *Claim
	)
	answer := func(v followView, err error) {
		if err != nil {
			v.Err = err.Error()
		}
		if free, total, err := d.MemGetInfo(); err == nil {
			v.Used, v.Total = total-free, total
		}
		b, _ := json.Marshal(v)
		fmt.Printf("followchild: %s\n", b)
	}
	// resize follows a target: it frees the last blocks, or allocates
	// more, so that the cache holds tg.Blocks.
	resize := func(tg Target) (followView, error) {
		for int64(len(cache)) > tg.Blocks {
			if err := cache[len(cache)-1].Free(); err != nil {
				return followView{}, err
			}
			cache = cache[:len(cache)-1]
		}
		for int64(len(cache)) < tg.Blocks {
			b, err := d.Alloc(block)
			if err != nil {
				return followView{}, err
			}
			cache = append(cache, b)
		}
		v := followView{Blocks: tg.Blocks, Want: tg.Common.Blocks, Budget: budget.Blocks, OverShare: tg.Common.Budgets[0].OverShare,
			Sharers: tg.Sharers, Changed: tg.Changed, PerProcess: tg.PerProcess, Claimed: tg.Common.Budgets[0].Claimed}
		if tg.PerProcessErr != nil {
			v.PerErr = tg.PerProcessErr.Error()
		}
		return v, nil
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		a := strings.Fields(sc.Text())
		switch a[0] {
		case "start": // start WEIGHTS PASS UTILIZATION BLOCK: baseline, weights, a measured pass, a follower
			w, _ := strconv.ParseInt(a[1], 0, 64)
			pass, _ := strconv.ParseInt(a[2], 0, 64)
			u, _ := strconv.ParseFloat(a[3], 64)
			block, _ = strconv.ParseInt(a[4], 0, 64)
			err := func() error {
				if !based {
					var err error
					if base, err = d.Baseline(); err != nil {
						return err
					}
				}
				if w > 0 {
					b, err := d.Alloc(w)
					if err != nil {
						return err
					}
					weights = append(weights, b)
				}
				m, err := d.Measure(func() error {
					b, err := d.Alloc(pass)
					if err != nil {
						return err
					}
					return b.Free()
				})
				if err != nil {
					return err
				}
				if budget, err = m.Budget(base, u, block); err != nil {
					budget = Budget{} // refused at the baseline: the follower is not
				}
				f, err = m.Follow(base, u, block)
				return err
			}()
			answer(followView{Budget: budget.Blocks}, err)
		case "weights": // weights N: take the baseline, then load N bytes of weights, with no follower yet
			n, _ := strconv.ParseInt(a[1], 0, 64)
			var err error
			base, err = d.Baseline() // creates the context first
			based = true
			if err == nil {
				var b *Buffer
				if b, err = d.Alloc(n); err == nil {
					weights = append(weights, b)
				}
			}
			answer(followView{}, err)
		case "read":
			tg, err := f.Read()
			var v followView
			if err == nil {
				v, err = resize(tg)
			}
			answer(v, err)
		case "run": // run: Run every millisecond, sending changes
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			cancel = stop
			changes, done = make(chan Target), make(chan error, 1)
			go func() { done <- f.Run(ctx, time.Millisecond, changes) }()
			answer(followView{}, nil)
		case "next": // next: the next change Run sends, followed
			v, err := resize(<-changes)
			answer(v, err)
		case "claims": // claims DIR: count the claims of the board in DIR
			c, err := OpenClaims(a[1])
			if err == nil {
				err = f.CountClaims(c)
			}
			answer(followView{}, err)
		case "claim": // claim DIR BYTES: a newcomer's claim of a load of BYTES on the board in DIR
			n, _ := strconv.ParseInt(a[2], 0, 64)
			err := func() error {
				c, err := OpenClaims(a[1])
				if err != nil {
					return err
				}
				p, err := Plan{Device: d, Parts: []PlanPart{{Size: n, Count: 1}}, Claims: c}.Predict()
				if err != nil {
					return err
				}
				claim, err = p.Claim(time.Minute)
				return err
			}()
			var v followView
			if claim != nil {
				v.Claimed = claim.Bytes()
			}
			answer(v, err)
		case "take": // take N: allocate N bytes more
			n, _ := strconv.ParseInt(a[1], 0, 64)
			b, err := d.Alloc(n)
			if err == nil {
				weights = append(weights, b)
			}
			answer(followView{}, err)
		case "withdraw": // withdraw: the newcomer's claim
			answer(followView{}, claim.Withdraw())
		case "stop": // stop: ends Run, answering its error
			cancel()
			answer(followView{PerErr: fmt.Sprint(<-done)}, nil)
		}
	}
}

// Two followers on one fake GPU, in two processes: the first, alone,
// takes its whole budget; when the second loads its weights, the first
// shrinks for what the second holds beyond the share left to it; the
// second follows too, and they settle, reading one after the other, each
// moving one way only; when the second exits, the first grows back. The
// figures are the model's (TestFollowerTwoOnOneDevice): the fake driver
// and NVML give them exactly.
func TestCUDAFollowerTwoProcesses(t *testing.T) {
	machine := machineFile(t)
	a := startFollowChild(t, machine)
	const block = 64 << 20
	v := a.do("start %d %d 0.9 %d", 1<<30, 256<<20, block)
	require.Equal(t, int64(37), v.Budget, "0.9 × 4 GiB less 1024 + 256 MiB: 37 blocks of 64 MiB")
	v = a.do("read")
	assert.True(t, v.PerProcess, v.PerErr)
	assert.Equal(t, 1, v.Sharers)
	assert.Equal(t, v.Budget, v.Blocks, "alone: its whole budget at the first reading")
	assert.Zero(t, v.OverShare)
	assert.False(t, a.do("read").Changed, "nothing moved")

	b := startFollowChild(t, machine)
	b.do("weights %d", 512<<20)
	v = a.do("read")
	assert.Equal(t, 2, v.Sharers)
	assert.Equal(t, int64(608<<20)-outsideShare(0.9), v.OverShare, "the second's 560 MiB and this one's context, past the 409.6 MiB outside the share")
	assert.Equal(t, int64(34), v.Blocks)

	// Its weights are loaded. Budget refuses it (the device had less than
	// 0.5 × 4 GiB free at its baseline); the follower does not.
	bv := b.do("start 0 %d 0.5 %d", 128<<20, block)
	assert.Zero(t, bv.Budget)
	var as, bs []int64
	for range 60 {
		av, bv := a.do("read"), b.do("read")
		as, bs = append(as, av.Blocks), append(bs, bv.Blocks)
		if !av.Changed && !bv.Changed {
			break
		}
	}
	require.False(t, a.do("read").Changed || b.do("read").Changed, "settled: %v %v", as, bs)
	t.Logf("the first's blocks, reading by reading: %v; the second's: %v", as, bs)
	for i := 1; i < len(as); i++ {
		assert.LessOrEqual(t, as[i], as[i-1], "the first only shrinks: %v", as)
		assert.GreaterOrEqual(t, bs[i], bs[i-1], "the second only grows: %v", bs)
	}
	na, nb := as[len(as)-1], bs[len(bs)-1]
	assert.Equal(t, int64(34), na+nb, "%v %v", as, bs)
	assert.GreaterOrEqual(t, nb, int64(21), "its budget, less at most the block the split leaves")

	b.stop()
	v = a.do("read")
	assert.Equal(t, int64(37), v.Blocks, "alone again: grows back at once")
	assert.Equal(t, 1, v.Sharers)
}

// A follower that counts claims shrinks for a newcomer's claim at its next
// reading, before the newcomer allocates; as the newcomer loads, its
// memory moves from its claim into use (NVML's figure of it grows, and its
// claim counts for less by as much), so the follower holds still; once the
// claim is withdrawn it grows back to what the newcomer holds, and, once
// the newcomer exits, to its blocks alone.
func TestCUDAFollowerCountsClaims(t *testing.T) {
	machine := machineFile(t)
	board := t.TempDir()
	a := startFollowChild(t, machine)
	const block = 64 << 20
	a.do("start %d %d 0.9 %d", 1<<30, 256<<20, block)
	a.do("claims %s", board)
	v := a.do("read")
	require.True(t, v.PerProcess, v.PerErr)
	require.Equal(t, int64(37), v.Blocks, "0.9 × 4 GiB less 1024 + 256 MiB: 37 blocks of 64 MiB")
	assert.Zero(t, v.Claimed)

	b := startFollowChild(t, machine)
	bv := b.do("claim %s %d", board, 1<<30)
	assert.Equal(t, int64(1<<30), bv.Claimed, "a load of 1 GiB, whole granules")
	v = a.do("read")
	assert.Equal(t, int64(1<<30), v.Claimed, "the claim, before the newcomer allocates")
	assert.Equal(t, int64(1120<<20)-outsideShare(0.9), v.OverShare, "1 GiB claimed beside the two contexts, past the 409.6 MiB outside the share")
	assert.Equal(t, int64(26), v.Blocks, "shrunk at the first reading")
	claimed := v

	b.do("take %d", 512<<20)
	v = a.do("read")
	assert.Equal(t, int64(512<<20), v.Claimed, "the claim counts for what the newcomer has not taken yet")
	assert.Equal(t, claimed.OverShare, v.OverShare, "memory moved from the claim into use counts once")
	assert.Equal(t, claimed.Blocks, v.Blocks)
	assert.False(t, v.Changed, "the follower holds still while the newcomer loads")

	b.do("take %d", 512<<20)
	b.do("withdraw")
	v = a.do("read")
	assert.Zero(t, v.Claimed)
	assert.Equal(t, claimed.OverShare, v.OverShare, "all of the claim in use now")
	assert.Equal(t, claimed.Blocks, v.Blocks)

	b.stop()
	v = a.do("read")
	assert.Equal(t, int64(37), v.Blocks, "alone again: grows back at once")
}

// outsideShare is what a budget of utilization leaves outside it of the
// fake's first device, of 4 GiB: Total - Requested.
func outsideShare(utilization float64) int64 {
	total := int64(4 << 30)
	return total - requestedOf(utilization, total)
}

// Without NVML's figures, the follower reads the device-wide ones, and
// says why.
func TestCUDAFollowerDeviceWide(t *testing.T) {
	machine := machineFile(t)
	a := startFollowChild(t, machine, "FAKENVML_ERROR=9")
	a.do("start %d %d 0.9 %d", 1<<30, 256<<20, 64<<20)
	v := a.do("read")
	assert.False(t, v.PerProcess)
	assert.Contains(t, v.PerErr, "NVML is unavailable")
	assert.Equal(t, int64(37), v.Blocks, "alone, the same blocks")

	// Another process takes 512 MiB: device-wide, it is outside the
	// budget, with its context and this one's, past the 409.6 MiB; the
	// same figures as NVML's.
	b := startFollowChild(t, machine)
	b.do("weights %d", 512<<20)
	v = a.do("read")
	assert.Equal(t, int64(608<<20)-outsideShare(0.9), v.OverShare)
	assert.Equal(t, int64(34), v.Blocks)
	b.stop()
	assert.Equal(t, int64(37), a.do("read").Blocks)
}

// Run sends the first target, then each change, as another process
// takes and gives back memory; a cancelled context ends it.
func TestCUDAFollowerRun(t *testing.T) {
	machine := machineFile(t)
	a := startFollowChild(t, machine)
	a.do("start %d %d 0.9 %d", 1<<30, 256<<20, 64<<20)
	a.do("run")
	v := a.do("next")
	assert.Equal(t, int64(37), v.Blocks)
	assert.True(t, v.Changed)

	b := startFollowChild(t, machine)
	b.do("weights %d", 512<<20)
	v = a.do("next")
	assert.Equal(t, int64(34), v.Blocks, "the change the other process made")
	b.stop()
	v = a.do("next")
	assert.Equal(t, int64(37), v.Blocks)
	assert.Equal(t, "context canceled", a.do("stop").PerErr, "Run returns ctx's error")
}

// Two devices followed together: the common figure is the smaller's.
func TestCUDAFollowDevices(t *testing.T) {
	ds := cudaDevices(t, 2)
	var fs []*Follower
	var budgets []Budget
	for _, d := range ds {
		base, err := d.Baseline()
		require.NoError(t, err)
		m, err := d.Measure(func() error { return nil })
		require.NoError(t, err)
		f, err := m.Follow(base, 0.5, 16<<20)
		require.NoError(t, err)
		b, err := m.Budget(base, 0.5, 16<<20)
		require.NoError(t, err)
		fs, budgets = append(fs, f), append(budgets, b)
	}
	f, err := FollowDevices(fs...)
	require.NoError(t, err)
	tg, err := f.Read()
	require.NoError(t, err)
	c, err := NewCommonBudget(budgets...)
	require.NoError(t, err)
	assert.Equal(t, c.Blocks, tg.Common.Blocks)
	assert.Equal(t, c.Limiting, tg.Common.Limiting)
	assert.Equal(t, c.Blocks, tg.Blocks)
}

// BenchmarkCUDAFollowerRead is one reading on the fake driver and NVML,
// alone on the device: cuMemGetInfo, NVML's process list, the graph
// memory attributes, and the formula.
func BenchmarkCUDAFollowerRead(b *testing.B) {
	d, err := CUDA(0)
	if err != nil {
		b.Skip(err)
	}
	base, err := d.Baseline()
	require.NoError(b, err)
	m, err := d.Measure(func() error { return nil })
	require.NoError(b, err)
	f, err := m.Follow(base, 0.5, 16<<20)
	require.NoError(b, err)
	for b.Loop() {
		if _, err := f.Read(); err != nil {
			b.Fatal(err)
		}
	}
}
