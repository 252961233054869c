package claims

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const gpu = "GPU-4a1b2c3d-0000-1111-2222-333344445555"

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// other is a process on another host, whose liveness no reader knows.
var other = Owner{Host: "elsewhere", PIDNS: "pid:[1]", PID: 4242, Start: 99}

func claim(bytes int64, owner Owner, made time.Time, ttl time.Duration) Claim {
	return Claim{Device: gpu, Bytes: bytes, Base: -1, Owner: owner, Made: made, Expires: made.Add(ttl)}
}

func TestOpenMakesASharedDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "memtrack-claims")
	b, err := Open(dir)
	require.NoError(t, err)
	assert.Equal(t, dir, b.Dir())
	fi, err := os.Stat(dir)
	require.NoError(t, err)
	if runtime.GOOS != "windows" {
		assert.Equal(t, fs.ModeDir|fs.ModeSticky|0o777, fi.Mode(), "every user posts, only the owner replaces or removes")
	}

	// An existing directory keeps its mode.
	own := t.TempDir()
	require.NoError(t, os.Chmod(own, 0o750))
	_, err = Open(own)
	require.NoError(t, err)
	fi, err = os.Stat(own)
	require.NoError(t, err)
	assert.Equal(t, fs.ModeDir|0o750, fi.Mode())

	file := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = Open(file)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = Open("")
	require.ErrorIs(t, err, ErrInvalid)
}

func TestPostReadRenewWithdraw(t *testing.T) {
	b, err := Open(t.TempDir())
	require.NoError(t, err)
	me := Self()
	p, err := b.Post(claim(3<<30, me, t0, time.Minute))
	require.NoError(t, err)
	posted := p.Claim()
	assert.Equal(t, Version, posted.Version)
	assert.Regexp(t, `^GPU-4a1b2c3d-0000-1111-2222-333344445555\.[0-9a-f]{16}\.claim$`, posted.Name)

	r, err := b.Read(gpu, t0.Add(time.Second), other)
	require.NoError(t, err)
	require.Len(t, r.Claims, 1)
	assert.Equal(t, posted, r.Claims[0])
	r, err = b.Read("GPU-another", t0.Add(time.Second), other)
	require.NoError(t, err)
	assert.Empty(t, r.Claims, "a claim is on its device alone")

	// Past its expiry it is skipped; renewed, it is live again.
	r, err = b.Read(gpu, t0.Add(2*time.Minute), other)
	require.NoError(t, err)
	assert.Equal(t, Reading{Expired: 1}, r)
	entries, err := os.ReadDir(b.Dir())
	require.NoError(t, err)
	assert.Empty(t, entries, "the reader removed the expired claim's file")

	p, err = b.Post(claim(5<<20, me, t0, time.Minute))
	require.NoError(t, err)
	require.NoError(t, p.Renew(t0.Add(time.Hour)))
	assert.Equal(t, t0.Add(time.Hour), p.Claim().Expires)
	r, err = b.Read(gpu, t0.Add(30*time.Minute), other)
	require.NoError(t, err)
	require.Len(t, r.Claims, 1, "renewed, it lives past its first expiry")
	assert.Equal(t, int64(5<<20), r.Claims[0].Bytes)
	assert.Zero(t, r.Expired)

	require.ErrorIs(t, p.Renew(t0.Add(-time.Hour)), ErrInvalid, "an expiry before it was made")
	assert.Equal(t, t0.Add(time.Hour), p.Claim().Expires, "a refused renewal changes nothing")

	require.NoError(t, p.Withdraw())
	r, err = b.Read(gpu, t0.Add(30*time.Minute), other)
	require.NoError(t, err)
	assert.Empty(t, r.Claims)
	require.ErrorIs(t, p.Withdraw(), ErrWithdrawn)
	require.ErrorIs(t, p.Renew(t0.Add(2*time.Hour)), ErrWithdrawn)
	entries, err = os.ReadDir(b.Dir())
	require.NoError(t, err)
	assert.Empty(t, entries, "nothing left behind: no claim, no temporary file")
}

func TestReadOrdersOldestFirst(t *testing.T) {
	b, err := Open(t.TempDir())
	require.NoError(t, err)
	for i, at := range []time.Duration{3, 1, 2} {
		_, err := b.Post(claim(int64(i+1), other, t0.Add(at*time.Second), time.Hour))
		require.NoError(t, err)
	}
	r, err := b.Read(gpu, t0.Add(time.Minute), Self())
	require.NoError(t, err)
	require.Len(t, r.Claims, 3)
	for i, want := range []int64{2, 3, 1} {
		assert.Equal(t, want, r.Claims[i].Bytes)
	}
}

func TestReadSkipsTheDead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a dead owner is known from /proc, on Linux")
	}
	me := Self()
	require.NotZero(t, me.Start, "this process's start time, from /proc/self/stat")
	require.NotEmpty(t, me.PIDNS)

	child := exec.Command("true")
	require.NoError(t, child.Run())
	gone := me
	gone.PID = child.Process.Pid // exited: /proc has it no longer
	reused := me
	reused.Start = me.Start + 1 // this PID, started at another time: another process

	b, err := Open(t.TempDir())
	require.NoError(t, err)
	for _, o := range []Owner{gone, reused, me, other} {
		_, err := b.Post(claim(1<<20, o, t0, time.Hour))
		require.NoError(t, err)
	}
	r, err := b.Read(gpu, t0.Add(time.Minute), me)
	require.NoError(t, err)
	assert.Equal(t, 2, r.Dead)
	require.Len(t, r.Claims, 2, "this process's and the other host's, whose liveness is not known")
	owners := []Owner{r.Claims[0].Owner, r.Claims[1].Owner}
	assert.ElementsMatch(t, []Owner{me, other}, owners)

	alive, known := Alive(me, me)
	assert.True(t, alive && known)
	_, known = Alive(other, me)
	assert.False(t, known, "another host's process")
	elsewhere := me
	elsewhere.PIDNS = "pid:[1]"
	_, known = Alive(elsewhere, me)
	assert.False(t, known, "another PID namespace's process")
}

func TestReadSkipsWhatIsNoClaim(t *testing.T) {
	b, err := Open(t.TempDir())
	require.NoError(t, err)
	_, err = b.Post(claim(7, other, t0, time.Hour))
	require.NoError(t, err)
	valid, err := json.Marshal(Claim{Version: Version, Device: "GPU-other", Bytes: 1, Base: -1, Owner: other, Made: t0, Expires: t0.Add(time.Hour)})
	require.NoError(t, err)
	for name, data := range map[string]string{
		fileKey(gpu) + ".torn.claim":       `{"version":1,"device":"` + gpu,
		fileKey(gpu) + ".v2.claim":         `{"version":2}`,
		fileKey(gpu) + ".another.claim":    string(valid), // a file named for this device, of another
		".tmp-123":                         `{"version":1}`,
		fileKey(gpu) + ".no-suffix":        `{"version":1}`,
		fileKey("GPU-other") + ".ok.claim": string(valid),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(b.Dir(), name), []byte(data), 0o644))
	}
	r, err := b.Read(gpu, t0.Add(time.Minute), Self())
	require.NoError(t, err)
	require.Len(t, r.Claims, 1)
	assert.Equal(t, int64(7), r.Claims[0].Bytes)
	assert.Equal(t, 2, r.Unreadable)
}

func TestPostRefuses(t *testing.T) {
	b, err := Open(t.TempDir())
	require.NoError(t, err)
	for name, c := range map[string]Claim{
		"no device":       {Bytes: 1, Base: -1, Owner: other, Made: t0, Expires: t0.Add(time.Hour)},
		"a path":          {Device: "../x", Bytes: 1, Base: -1, Owner: other, Made: t0, Expires: t0.Add(time.Hour)},
		"no bytes":        {Device: gpu, Base: -1, Owner: other, Made: t0, Expires: t0.Add(time.Hour)},
		"negative bytes":  {Device: gpu, Bytes: -5, Base: -1, Owner: other, Made: t0, Expires: t0.Add(time.Hour)},
		"base below -1":   {Device: gpu, Bytes: 1, Base: -2, Owner: other, Made: t0, Expires: t0.Add(time.Hour)},
		"no PID":          {Device: gpu, Bytes: 1, Base: -1, Made: t0, Expires: t0.Add(time.Hour)},
		"expired at once": {Device: gpu, Bytes: 1, Base: -1, Owner: other, Made: t0, Expires: t0},
		"never made":      {Device: gpu, Bytes: 1, Base: -1, Owner: other, Expires: t0},
	} {
		t.Run(name, func(t *testing.T) {
			p, err := b.Post(c)
			require.ErrorIs(t, err, ErrInvalid)
			assert.Nil(t, p)
		})
	}
	entries, err := os.ReadDir(b.Dir())
	require.NoError(t, err)
	assert.Empty(t, entries, "a refused claim writes nothing")
}

func TestEffective(t *testing.T) {
	c := Claim{Bytes: 100, Base: 40}
	for _, tc := range []struct {
		used  int64
		known bool
		want  int64
	}{
		{0, false, 100}, // the owner's memory not seen: all of it
		{40, true, 100}, // nothing taken yet
		{30, true, 100}, // less than when it claimed: all of it
		{70, true, 70},  // 30 taken of the 100
		{140, true, 0},  // all taken
		{1000, true, 0}, // more than claimed: nothing left to count
		{1000, false, 100},
	} {
		assert.Equal(t, tc.want, Effective(c, tc.used, tc.known), "%+v", tc)
	}
	assert.Equal(t, int64(100), Effective(Claim{Bytes: 100, Base: -1}, 1000, true), "a base not known")
}

// TestConcurrentPostsAndReads: writers post, renew and withdraw while
// readers read; no reader ever meets a claim half written, and every
// claim is gone once its writer withdrew it.
func TestConcurrentPostsAndReads(t *testing.T) {
	b, err := Open(t.TempDir())
	require.NoError(t, err)
	const writers, renewals = 4, 20
	var start, wrote sync.WaitGroup
	start.Add(1)
	done := make(chan struct{})
	errs := make(chan error, writers+2)
	for w := range writers {
		wrote.Add(1)
		go func() {
			defer wrote.Done()
			start.Wait()
			o := other
			o.PID = 1000 + w
			p, err := b.Post(claim(int64(w+1)<<20, o, t0, time.Hour))
			if err != nil {
				errs <- err
				return
			}
			for i := range renewals {
				if err := p.Renew(t0.Add(time.Hour + time.Duration(i)*time.Second)); err != nil {
					errs <- err
					return
				}
			}
			if err := p.Withdraw(); err != nil {
				errs <- err
			}
		}()
	}
	var read sync.WaitGroup
	for range 2 {
		read.Add(1)
		go func() {
			defer read.Done()
			start.Wait()
			for {
				r, err := b.Read(gpu, t0.Add(time.Minute), Self())
				if err == nil && (r.Unreadable != 0 || len(r.Claims) > writers) {
					err = errors.New("a reader met a claim half written, or one twice")
				}
				if err != nil {
					errs <- err
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		}()
	}
	start.Done()
	wrote.Wait()
	close(done)
	read.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	r, err := b.Read(gpu, t0.Add(time.Minute), Self())
	require.NoError(t, err)
	assert.Equal(t, Reading{}, r)
}
