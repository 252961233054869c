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
