package memtrack_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/memtrack/memtrack"
)

// savedMeasurement is a measurement of another machine's GPU, as a file
// brings it: per-process figures, two categories, graphs.
func savedMeasurement(t testing.TB) memtrack.Measurement {
	dev, err := memtrack.ParseDevice("cpu")
	require.NoError(t, err)
	m := memtrack.Measurement{
		Device:       dev,
		StartTracked: 64 << 20, PeakTracked: 116 << 20, EndTracked: 64 << 20, PeakTrackedIncrease: 52 << 20,
		StartHeld: 64 << 20, PeakHeld: 116 << 20, EndHeld: 64 << 20, PeakHeldIncrease: 52 << 20,
		Total: 143771 << 20, StartUsed: 590 << 20, EndUsed: 590 << 20,
		StartGraphReserved: 0, EndGraphReserved: 128 << 20, EndGraphOutliving: 0, GraphNeed: 128 << 20,
		Categories: []memtrack.CategoryMeasurement{
			{Category: memtrack.CategoryWeights, StartTracked: 64 << 20, PeakTracked: 64 << 20, EndTracked: 64 << 20},
			{Category: memtrack.CategoryActivations, PeakTracked: 52 << 20, PeakTrackedIncrease: 52 << 20},
		},
		PerProcess: true, StartProcessUsed: 582 << 20, EndProcessUsed: 582 << 20,
		StartOtherProcessesUsed: 10758 << 20, EndOtherProcessesUsed: 10758 << 20,
		OtherProcesses: []memtrack.ProcessMemory{{PID: 449, Name: "python3", Used: 10758 << 20}},
	}
	return m
}

func TestMeasurementFileRoundTrip(t *testing.T) {
	measured, err := memtrack.CPU().Measure(func() error {
		b, err := memtrack.CPU().Alloc(3 << 20)
		if err != nil {
			return err
		}
		return b.Free()
	})
	require.NoError(t, err)
	withErr := savedMeasurement(t)
	withErr.PerProcess, withErr.StartProcessUsed, withErr.EndProcessUsed = false, 0, 0
	withErr.StartOtherProcessesUsed, withErr.EndOtherProcessesUsed, withErr.OtherProcesses = 0, 0, nil
	withErr.PerProcessErr = fmt.Errorf("%w: cuda:0: NVML lists 2 process(es) on the device, but not this one", memtrack.ErrPerProcessUnavailable)
	for name, m := range map[string]memtrack.Measurement{
		"measured on the CPU": measured, "another machine's": savedMeasurement(t), "without per-process figures": withErr,
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, memtrack.WriteMeasurement(&buf, m))
			assert.True(t, strings.HasPrefix(buf.String(), "{\n\t\"Format\": \"memtrack.Measurement\",\n\t\"Version\": 1,\n"), buf.String())
			got, err := memtrack.ReadMeasurement(&buf)
			require.NoError(t, err)
			if m.PerProcessErr != nil {
				require.Error(t, got.PerProcessErr)
				assert.Equal(t, m.PerProcessErr.Error(), got.PerProcessErr.Error())
				assert.ErrorIs(t, got.PerProcessErr, memtrack.ErrPerProcessUnavailable)
				got.PerProcessErr, m.PerProcessErr = nil, nil
			}
			assert.Equal(t, m, got)
		})
	}
}

// TestMeasurementFileRefused: a file of another version, or one that is
// not a measurement, is refused with what is wrong, and gives back no
// measurement.
func TestMeasurementFileRefused(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, memtrack.WriteMeasurement(&buf, savedMeasurement(t)))
	good := buf.String()
	edit := func(old, new string) string {
		require.Contains(t, good, old)
		return strings.Replace(good, old, new, 1)
	}
	for _, tc := range []struct {
		name, file, want string
		version          int
	}{
		{"version 2", edit(`"Version": 1`, `"Version": 2`), "version 2, and this build reads version 1", 2},
		{"no version", edit(`"Version": 1,`, ``), "no version", 0},
		{"another format", edit(`memtrack.Measurement`, `memtrack.Usage`), `format "memtrack.Usage"`, 1},
		{"empty", ``, "not one JSON object", 0},
		{"cut short", good[:len(good)/2], "not one JSON object", 0},
		{"an array", `[1, 2]`, "not one JSON object", 0},
		{"two objects", good + good, "not one JSON object", 0},
		{"an unknown field", edit(`"Total":`, `"Totall": 5, "Total":`), `unknown field "Totall"`, 1},
		{"a string for a figure", edit(`"Total": 150754820096`, `"Total": "big"`), "Total", 1},
		{"a device of no kind", edit(`"Device": "cpu"`, `"Device": "tpu:0"`), `invalid device: "tpu:0"`, 1},
		{"a negative total", edit(`"Total": 150754820096`, `"Total": -1`), "the figure Total is -1 bytes", 1},
		{"a negative graph need", edit(`"GraphNeed": 134217728`, `"GraphNeed": -134217728`), "GraphNeed is -134217728 bytes", 1},
		{"a peak below its start", edit(`"PeakTracked": 121634816`, `"PeakTracked": 1`), "PeakTracked is 1 bytes, below its start", 1},
		{"an increase that is no difference", edit(`"PeakHeldIncrease": 54525952`, `"PeakHeldIncrease": 5`), "the increase of PeakHeld is 5 bytes", 1},
		{"a used increase that is no difference", edit(`"UsedIncrease": 0`, `"UsedIncrease": 7`), "UsedIncrease is 7 bytes", 1},
		{"untracked that is no difference", edit(`"Untracked": 0`, `"Untracked": 7`), "Untracked is 7 bytes", 1},
		{"per-process figures without PerProcess", edit(`"PerProcess": true`, `"PerProcess": false`), "per-process figures without PerProcess", 1},
		{"a category twice", edit(`"Category": "activations"`, `"Category": "weights"`), `category "weights": each category once`, 1},
		{"a process of negative use", edit(`"Used": 11280580608`, `"Used": -1`), "other process 449 uses -1 bytes", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := memtrack.ReadMeasurement(strings.NewReader(tc.file))
			require.ErrorIs(t, err, memtrack.ErrMeasurementFile)
			var fe *memtrack.MeasurementFileError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.version, fe.Version)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "memtrack:"), "one prefix: %v", err)
			assert.Equal(t, memtrack.Measurement{}, m)
		})
	}
}

func TestMeasurementFileReadError(t *testing.T) {
	boom := errors.New("disk gone")
	_, err := memtrack.ReadMeasurement(failingReader{boom})
	require.ErrorIs(t, err, boom)
}

type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

// FuzzReadMeasurement: the reader never panics, refuses with a
// *MeasurementFileError, and what it accepts writes back to a file it
// reads as the same measurement.
func FuzzReadMeasurement(f *testing.F) {
	var buf bytes.Buffer
	require.NoError(f, memtrack.WriteMeasurement(&buf, savedMeasurement(f)))
	f.Add(buf.Bytes())
	f.Add([]byte(`{"Format":"memtrack.Measurement","Version":1,"Device":"cuda:3"}`))
	f.Add([]byte(`{"Format":"memtrack.Measurement","Version":2}`))
	f.Add([]byte(`{"Format":"memtrack.Measurement","Version":1,"Device":"cpu","PerProcessErr":"memtrack: no per-process figures: x"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := memtrack.ReadMeasurement(bytes.NewReader(data))
		if err != nil {
			require.ErrorIs(t, err, memtrack.ErrMeasurementFile)
			require.True(t, strings.HasPrefix(err.Error(), "memtrack: unreadable measurement file: "), err.Error())
			return
		}
		var again bytes.Buffer
		require.NoError(t, memtrack.WriteMeasurement(&again, m))
		m2, err := memtrack.ReadMeasurement(&again)
		require.NoError(t, err)
		if m.PerProcessErr != nil {
			require.Equal(t, m.PerProcessErr.Error(), m2.PerProcessErr.Error())
			m.PerProcessErr, m2.PerProcessErr = nil, nil
		}
		require.Equal(t, m, m2)
	})
}
