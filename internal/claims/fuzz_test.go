package claims

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// FuzzParse: Parse never panics, and what it accepts is a valid claim
// that writes back to a file Parse reads as the same claim.
func FuzzParse(f *testing.F) {
	good, err := json.Marshal(Claim{Version: Version, Device: gpu, Bytes: 3 << 30, Base: 518 << 20,
		Owner: Owner{Host: "h", PIDNS: "pid:[4026531836]", PID: 77, Start: 12345}, Made: t0, Expires: t0.Add(10 * time.Second)})
	require.NoError(f, err)
	f.Add(good)
	f.Add([]byte(`{"version":1,"device":"cpu","bytes":1,"base":-1,"owner":{"pid":1},"made":"2026-12-04T12:00:00Z","expires":"2026-12-04T12:00:01Z"}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"device":"x","bytes":-1}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, Claim{}, c)
			return
		}
		require.NoError(t, Check(c))
		again, err := json.Marshal(c)
		require.NoError(t, err)
		c2, err := Parse(again)
		require.NoError(t, err)
		require.True(t, c.Made.Equal(c2.Made) && c.Expires.Equal(c2.Expires))
		c.Made, c.Expires, c2.Made, c2.Expires = time.Time{}, time.Time{}, time.Time{}, time.Time{}
		require.Equal(t, c, c2)
	})
}

// boardModel is a plain model of a board: the claims posted, each live
// until withdrawn or past its expiry at a reading, which removes it.
type boardModel struct {
	claims []modelClaim
}

type modelClaim struct {
	c         Claim
	withdrawn bool
	removed   bool // skipped for its expiry by a reading, which removed its file
}

// live returns the claims on device at now, the oldest first, as Read
// must, and marks those past their expiry removed.
func (m *boardModel) live(device string, now time.Time) []int64 {
	var out []int64
	for i := range m.claims {
		mc := &m.claims[i]
		if mc.withdrawn || mc.removed || mc.c.Device != device {
			continue
		}
		if !now.Before(mc.c.Expires) {
			mc.removed = true
			continue
		}
		out = append(out, mc.c.Bytes)
	}
	return out
}

// FuzzBoard runs a sequence of posts, renewals, withdrawals and readings,
// decoded from the input, on a board and on the model, and checks that
// every reading returns the model's live claims, the oldest first, and
// that the board refuses what the model does (a renewal or a withdrawal
// of a claim withdrawn).
func FuzzBoard(f *testing.F) {
	f.Add([]byte{0, 5, 10, 3, 1, 0, 20, 2, 0, 3, 30, 0, 1, 7, 3, 3, 40})
	f.Add([]byte{0, 1, 1, 1, 0, 2, 2, 1, 2, 0, 3, 5, 1, 1, 9, 3, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		b, err := Open(t.TempDir())
		require.NoError(t, err)
		var m boardModel
		var posted []*Posted
		devices := []string{gpu, "GPU-other"}
		for i := 0; i+2 < len(ops) && i < 90; i += 3 {
			op, x, y := ops[i]%4, int64(ops[i+1]), int64(ops[i+2])
			switch op {
			case 0: // post: x bytes on device x%2, made at y s, for 1 + x%5 s
				made := t0.Add(time.Duration(y) * time.Second)
				c := Claim{Device: devices[x%2], Bytes: x + 1, Base: -1, Owner: other, Made: made, Expires: made.Add(time.Duration(1+x%5) * time.Second)}
				p, err := b.Post(c)
				require.NoError(t, err)
				posted = append(posted, p)
				c.Version, c.Name = Version, p.Claim().Name
				m.claims = append(m.claims, modelClaim{c: c})
			case 1: // renew claim x to y s
				if len(posted) == 0 {
					continue
				}
				k := int(x) % len(posted)
				mc := &m.claims[k]
				expires := t0.Add(time.Duration(y) * time.Second)
				err := posted[k].Renew(expires)
				switch {
				case mc.withdrawn:
					require.ErrorIs(t, err, ErrWithdrawn)
				case !expires.After(mc.c.Made):
					require.ErrorIs(t, err, ErrInvalid)
				default:
					require.NoError(t, err)
					mc.c.Expires = expires
					mc.removed = false // written anew
				}
			case 2: // withdraw claim x
				if len(posted) == 0 {
					continue
				}
				k := int(x) % len(posted)
				err := posted[k].Withdraw()
				if m.claims[k].withdrawn {
					require.ErrorIs(t, err, ErrWithdrawn)
				} else {
					require.NoError(t, err)
					m.claims[k].withdrawn = true
				}
			case 3: // read device x%2 at y s
				now := t0.Add(time.Duration(y) * time.Second)
				r, err := b.Read(devices[x%2], now, Self())
				require.NoError(t, err)
				require.Zero(t, r.Unreadable)
				want := m.live(devices[x%2], now)
				var got []int64
				for _, c := range r.Claims {
					got = append(got, c.Bytes)
				}
				require.ElementsMatch(t, want, got, "the live claims on %s at %v", devices[x%2], now)
				for j := 1; j < len(r.Claims); j++ {
					a, c := r.Claims[j-1], r.Claims[j]
					require.True(t, a.Made.Before(c.Made) || a.Made.Equal(c.Made) && a.Name < c.Name, "the oldest first")
				}
			}
		}
	})
}
