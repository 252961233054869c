package memtrack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/memtrack/memtrack/internal/bytesize"
	"github.com/memtrack/memtrack/internal/claims"
)

// Claims is a board on which the processes of a machine announce the
// memory they are about to take on a device, before it is in use: a
// directory that every memtrack process reads (internal/claims; docs/fit.md
// says why a directory). A process with a [Prediction] posts a claim of
// what its load needs ([Prediction.Claim]), waits until the device has room
// for it ([Claim.Wait]), loads, and withdraws the claim ([Claim.Withdraw]);
// a [Follower] that counts the board's claims ([Follower.CountClaims]) sets
// them aside as memory in use at its next reading, and shrinks the cache
// it sizes to make the room. A claim is not memory: nothing is reserved,
// and a process that announces nothing is seen only by the memory it
// holds, for which the plan's headroom is all that is kept.
//
// A claim names its device by the GPU's UUID, which names the same GPU in
// every process and container whatever CUDA_VISIBLE_DEVICES renumbers (the
// CPU by "cpu"), and expires unless its owner renews it: a process that
// dies leaves a claim that lasts until its expiry, or, on Linux, until a
// reader on its host and in its PID namespace finds it gone.
type Claims struct{ board *claims.Board }

// DefaultClaimsDir returns the directory of the board that the processes
// of one machine share where they are given none: memtrack-claims in the
// OS's temporary directory (/tmp/memtrack-claims on Linux). Containers
// that share a GPU each have a /tmp of their own: give them one directory
// of the host, mounted in each, instead.
func DefaultClaimsDir() string { return filepath.Join(os.TempDir(), "memtrack-claims") }

// OpenClaims opens the board of claims in directory dir, making it where
// it is missing, with mode 1777, as /tmp is: every user's processes may
// post claims, and only a claim's owner may replace or remove it. An
// existing directory keeps its mode: give it to a group where not every
// user should post. It fails with [ErrInvalidArgument] where dir is empty
// or not a directory, and with the OS's error where it cannot be made.
func OpenClaims(dir string) (*Claims, error) {
	b, err := claims.Open(dir)
	if errors.Is(err, claims.ErrInvalid) {
		return nil, fmt.Errorf("%w: claims in %q: %v", ErrInvalidArgument, dir, err)
	}
	if err != nil {
		return nil, wrapf(err, "claims in %s", dir)
	}
	return &Claims{board: b}, nil
}

// Dir returns the board's directory.
func (c *Claims) Dir() string { return c.board.Dir() }

// Claimed returns what other processes' live claims on device d count for
// now, as a [Follower] counts them: each claim's bytes, less what its
// owner has taken on d since it claimed where the driver's per-process
// figures show it (NVML listing the owner in this process's PID
// namespace), so that memory moving from a claim into use counts once.
func (c *Claims) Claimed(d Device) (int64, error) {
	if c == nil {
		return 0, fmt.Errorf("%w: Claimed on a nil *Claims", ErrInvalidArgument)
	}
	u, err := d.Usage()
	if err != nil {
		return 0, err
	}
	return c.claimed(d, u, nil)
}

// claimed sums the claims of other processes on d that reading u finds,
// those posted before own only where own is a claim of this process's.
func (c *Claims) claimed(d Device, u Usage, own *claims.Posted) (int64, error) {
	key, err := claimKey(d)
	if err != nil {
		return 0, err
	}
	self := claims.Self()
	r, err := c.board.Read(key, time.Now(), self)
	if err != nil {
		return 0, wrapf(err, "claims on %v", d)
	}
	var mine claims.Claim
	if own != nil {
		mine = own.Claim()
	}
	var sum int64
	for _, cl := range r.Claims {
		if cl.Owner == self {
			continue // this process's own
		}
		if own != nil && !(cl.Made.Before(mine.Made) || cl.Made.Equal(mine.Made) && cl.Name < mine.Name) {
			continue // posted after this process's: it waits for this one
		}
		used, known := int64(0), false
		if u.PerProcess && cl.Owner.Host == self.Host && cl.Owner.PIDNS != "" && cl.Owner.PIDNS == self.PIDNS {
			for _, p := range u.OtherProcesses {
				if p.PID == cl.Owner.PID {
					used, known = p.Used, true
				}
			}
		}
		sum = addSat(sum, claims.Effective(cl, used, known))
	}
	return min(sum, max(u.Total, 0)), nil
}

// claimKey names device d on a board: its UUID where the driver gives one,
// which names it alike in every process, else its name here.
func claimKey(d Device) (string, error) {
	info, err := d.Info()
	if err != nil {
		return "", err
	}
	if info.UUID != "" {
		return info.UUID, nil
	}
	return d.String(), nil
}

// Claim is a claim this process posted of the memory a load needs on a
// device ([Prediction.Claim]). Its methods are safe for concurrent use.
type Claim struct {
	mu        sync.Mutex
	plan      Plan
	posted    *claims.Posted
	ttl       time.Duration
	renew     time.Time // when the claim was last written
	withdrawn bool
}

// Claim posts, on the plan's board (Plan.Claims), a claim of Need +
// Headroom on the plan's device: what the load takes at its most and the
// headroom
// kept beside it, which followers that count the board set aside as in use
// from their next reading. The claim expires ttl after it is posted, and
// after each renewal ([Claim.Wait] renews it as it waits, [Claim.Renew] on
// demand); choose a ttl longer than the load takes, or renew it meanwhile.
// It fails with [ErrInvalidArgument] where the plan has no board, and with
// [ErrInvalidSize] for a ttl that is not positive or a claim of nothing,
// changing nothing.
func (p Prediction) Claim(ttl time.Duration) (*Claim, error) {
	if p.Plan.Claims == nil {
		return nil, fmt.Errorf("%w: a claim on %v without a board: set Plan.Claims (OpenClaims)", ErrInvalidArgument, p.Plan.Device)
	}
	bytes := addSat(p.Need, p.Plan.Headroom)
	if ttl <= 0 || bytes <= 0 {
		return nil, fmt.Errorf("%w: a claim of %d bytes on %v lasting %v: want a positive size and duration", ErrInvalidSize, bytes, p.Plan.Device, ttl)
	}
	key, err := claimKey(p.Plan.Device)
	if err != nil {
		return nil, err
	}
	base := int64(-1)
	if p.PerProcess {
		base = p.Before
	}
	now := time.Now()
	posted, err := p.Plan.Claims.board.Post(claims.Claim{Device: key, Bytes: bytes, Base: base, Owner: claims.Self(), Made: now, Expires: now.Add(ttl)})
	if err != nil {
		return nil, wrapf(err, "a claim of %s on %v", bytesize.Format(bytes), p.Plan.Device)
	}
	return &Claim{plan: p.Plan, posted: posted, ttl: ttl, renew: now}, nil
}

// Device returns the claim's device.
func (c *Claim) Device() Device { return c.plan.Device }

// Bytes returns what the claim claims.
func (c *Claim) Bytes() int64 { return c.posted.Claim().Bytes }

// Renew moves the claim's expiry to its ttl from now. It fails once the
// claim is withdrawn.
func (c *Claim) Renew() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.renewLocked(time.Now())
}

func (c *Claim) renewLocked(now time.Time) error {
	if err := c.posted.Renew(now.Add(c.ttl)); err != nil {
		return c.refused(err)
	}
	c.renew = now
	return nil
}

// Wait waits until the claim's device has room for the load: it predicts
// the plan again ([Plan.Predict]) at once and every interval, counting the
// claims of other processes posted before this one (those posted after it
// wait for it), until the prediction fits, and returns it, read just
// before the load: Check it after the load. Meanwhile it renews the claim,
// a third of its ttl at a time. Where ctx is done first, it returns the
// last prediction and ctx's error, wrapped with how far the device was
// from room; the claim stays posted until withdrawn.
func (c *Claim) Wait(ctx context.Context, interval time.Duration) (Prediction, error) {
	if ctx == nil || interval <= 0 {
		return Prediction{Plan: c.plan}, fmt.Errorf("%w: Wait every %v: want a context and a positive interval", ErrInvalidArgument, interval)
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		c.mu.Lock()
		if c.withdrawn {
			c.mu.Unlock()
			return Prediction{Plan: c.plan}, fmt.Errorf("%w: Wait on the claim on %v, withdrawn already", ErrInvalidArgument, c.plan.Device)
		}
		p, err := c.plan.predict(c.posted)
		if err == nil && time.Since(c.renew) >= c.ttl/3 {
			err = c.renewLocked(time.Now())
		}
		c.mu.Unlock()
		if err != nil || p.Fits {
			return p, err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return p, wrapf(ctx.Err(), "waiting for room for %s on %v: %s free, %s claimed before this claim, %s kept as headroom",
				bytesize.Format(p.Need), p.Plan.Device, bytesize.Format(p.Free), bytesize.Format(p.Claimed), bytesize.Format(p.Plan.Headroom))
		}
	}
}

// Withdraw removes the claim from the board: call it once the load is
// done, and its memory in use. A second Withdraw fails, changing nothing.
func (c *Claim) Withdraw() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.posted.Withdraw(); err != nil {
		return c.refused(err)
	}
	c.withdrawn = true
	return nil
}

// refused is the error of a claim that its board refused.
func (c *Claim) refused(err error) error {
	if errors.Is(err, claims.ErrWithdrawn) {
		return fmt.Errorf("%w: the claim on %v is withdrawn already", ErrInvalidArgument, c.plan.Device)
	}
	return wrapf(err, "the claim on %v", c.plan.Device)
}
