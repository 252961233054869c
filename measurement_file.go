package memtrack

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// A Measurement written to a file and read back, so that a run on one
// machine can plan a load on another before any pass runs there
// ([Plan.WithMeasurement]): JSON, with the format's name and version
// first, then every figure under its field's name.

// MeasurementFileVersion is the version of the Measurement files that
// [WriteMeasurement] writes and [ReadMeasurement] reads.
const MeasurementFileVersion = 1

// measurementFormat names the format in each file.
const measurementFormat = "memtrack.Measurement"

// ErrMeasurementFile is matched by the error of [ReadMeasurement] for a
// file it cannot read: one of another version, or one that is not a
// Measurement (corrupt, cut short, or with figures that no measurement
// has). It comes as a [*MeasurementFileError].
var ErrMeasurementFile = errors.New("memtrack: unreadable measurement file")

// MeasurementFileError is why [ReadMeasurement] refused a file. It matches
// [ErrMeasurementFile].
type MeasurementFileError struct {
	// Version is the file's version where it has one, else 0; where it is
	// not MeasurementFileVersion, the file is of another version.
	Version int
	// Err says what is wrong, where the version is this one's.
	Err error
}

func (e *MeasurementFileError) Error() string {
	if e.Version != MeasurementFileVersion && e.Version != 0 {
		return fmt.Sprintf("%v: version %d, and this build reads version %d: write it again with this build (WriteMeasurement)", ErrMeasurementFile, e.Version, MeasurementFileVersion)
	}
	return fmt.Sprintf("%v: %s", ErrMeasurementFile, reason(e.Err))
}

// Is reports that the error matches ErrMeasurementFile.
func (e *MeasurementFileError) Is(target error) bool { return target == ErrMeasurementFile }

// Unwrap returns what is wrong.
func (e *MeasurementFileError) Unwrap() error { return e.Err }

// measurementFile is a Measurement as its file holds it: its errors as
// their text, its device by its name.
type measurementFile struct {
	Format  string
	Version int
	Device  string

	StartTracked, PeakTracked, EndTracked, PeakTrackedIncrease int64
	StartHeld, PeakHeld, EndHeld, PeakHeldIncrease             int64
	Total, StartUsed, EndUsed, UsedIncrease                    int64
	StartNotResident, EndNotResident                           int64
	Untracked                                                  int64
	StartGraphReserved, EndGraphReserved, EndGraphOutliving    int64
	GraphNeed                                                  int64
	Categories                                                 []CategoryMeasurement

	PerProcess                                     bool
	PerProcessErr                                  string
	StartProcessUsed, EndProcessUsed               int64
	StartOtherProcessesUsed, EndOtherProcessesUsed int64
	ProcessUntracked                               int64
	OtherProcesses                                 []ProcessMemory
}

// WriteMeasurement writes m to w as a Measurement file of
// [MeasurementFileVersion], which [ReadMeasurement] reads back, here or on
// another machine. The per-process error is written as its text.
func WriteMeasurement(w io.Writer, m Measurement) error {
	f := measurementFile{
		Format: measurementFormat, Version: MeasurementFileVersion, Device: m.Device.String(),
		StartTracked: m.StartTracked, PeakTracked: m.PeakTracked, EndTracked: m.EndTracked, PeakTrackedIncrease: m.PeakTrackedIncrease,
		StartHeld: m.StartHeld, PeakHeld: m.PeakHeld, EndHeld: m.EndHeld, PeakHeldIncrease: m.PeakHeldIncrease,
		Total: m.Total, StartUsed: m.StartUsed, EndUsed: m.EndUsed, UsedIncrease: m.UsedIncrease,
		StartNotResident: m.StartNotResident, EndNotResident: m.EndNotResident, Untracked: m.Untracked,
		StartGraphReserved: m.StartGraphReserved, EndGraphReserved: m.EndGraphReserved, EndGraphOutliving: m.EndGraphOutliving,
		GraphNeed: m.GraphNeed, Categories: m.Categories,
		PerProcess: m.PerProcess, StartProcessUsed: m.StartProcessUsed, EndProcessUsed: m.EndProcessUsed,
		StartOtherProcessesUsed: m.StartOtherProcessesUsed, EndOtherProcessesUsed: m.EndOtherProcessesUsed,
		ProcessUntracked: m.ProcessUntracked, OtherProcesses: m.OtherProcesses,
	}
	if m.PerProcessErr != nil {
		f.PerProcessErr = m.PerProcessErr.Error()
	}
	data, err := json.MarshalIndent(f, "", "\t")
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// ReadMeasurement reads a Measurement file that [WriteMeasurement] wrote,
// of this build's [MeasurementFileVersion]. Its device is read as
// [ParseDevice] reads one, and need not exist on this machine. A
// per-process error comes back as an error with the text written, which
// matches [ErrPerProcessUnavailable].
//
// It fails with a [*MeasurementFileError] (matching [ErrMeasurementFile])
// for a file of another version, and for one that is not a Measurement: not
// JSON, not of this format, with a field it does not know or without its
// version, with a figure below 0 where none can be, or with figures that
// disagree as no measurement's do (a peak below its start or its end, an
// increase that is not its two figures' difference, per-process figures
// without PerProcess, a category twice).
func ReadMeasurement(r io.Reader) (Measurement, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return Measurement{}, err
	}
	var head struct {
		Format  string
		Version int
	}
	if err := json.Unmarshal(data, &head); err != nil { // and nothing after it
		return Measurement{}, &MeasurementFileError{Err: fmt.Errorf("not one JSON object: %w", err)}
	}
	if head.Format != measurementFormat {
		return Measurement{}, &MeasurementFileError{Version: head.Version, Err: fmt.Errorf("format %q, want %q", head.Format, measurementFormat)}
	}
	if head.Version != MeasurementFileVersion {
		if head.Version == 0 {
			return Measurement{}, &MeasurementFileError{Err: errors.New("no version")}
		}
		return Measurement{}, &MeasurementFileError{Version: head.Version}
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	var f measurementFile
	if err := d.Decode(&f); err != nil {
		return Measurement{}, &MeasurementFileError{Version: head.Version, Err: err}
	}
	m, err := f.measurement()
	if err != nil {
		return Measurement{}, &MeasurementFileError{Version: head.Version, Err: err}
	}
	return m, nil
}

// measurement checks the file's figures and returns its Measurement.
func (f measurementFile) measurement() (Measurement, error) {
	dev, err := parseDeviceName(f.Device)
	if err != nil {
		return Measurement{}, err
	}
	for _, v := range []struct {
		name string
		n    int64
	}{
		{"StartTracked", f.StartTracked}, {"PeakTracked", f.PeakTracked}, {"EndTracked", f.EndTracked},
		{"StartHeld", f.StartHeld}, {"PeakHeld", f.PeakHeld}, {"EndHeld", f.EndHeld},
		{"Total", f.Total}, {"StartUsed", f.StartUsed}, {"EndUsed", f.EndUsed},
		{"StartNotResident", f.StartNotResident}, {"EndNotResident", f.EndNotResident},
		{"StartGraphReserved", f.StartGraphReserved}, {"EndGraphReserved", f.EndGraphReserved},
		{"EndGraphOutliving", f.EndGraphOutliving}, {"GraphNeed", f.GraphNeed},
		{"StartProcessUsed", f.StartProcessUsed}, {"EndProcessUsed", f.EndProcessUsed},
		{"StartOtherProcessesUsed", f.StartOtherProcessesUsed}, {"EndOtherProcessesUsed", f.EndOtherProcessesUsed},
	} {
		if v.n < 0 {
			return Measurement{}, fmt.Errorf("the figure %s is %d bytes: want 0 or more", v.name, v.n)
		}
	}
	if err := peakOf("Tracked", f.StartTracked, f.PeakTracked, f.EndTracked, f.PeakTrackedIncrease); err != nil {
		return Measurement{}, err
	}
	if err := peakOf("Held", f.StartHeld, f.PeakHeld, f.EndHeld, f.PeakHeldIncrease); err != nil {
		return Measurement{}, err
	}
	if f.UsedIncrease != f.EndUsed-f.StartUsed {
		return Measurement{}, fmt.Errorf("the figure UsedIncrease is %d bytes, not EndUsed - StartUsed = %d", f.UsedIncrease, f.EndUsed-f.StartUsed)
	}
	if want := f.UsedIncrease + (f.EndNotResident - f.StartNotResident) - (f.EndHeld - f.StartHeld); f.Untracked != want {
		return Measurement{}, fmt.Errorf("the figure Untracked is %d bytes, not UsedIncrease + (EndNotResident - StartNotResident) - (EndHeld - StartHeld) = %d", f.Untracked, want)
	}
	if !f.PerProcess && (f.StartProcessUsed != 0 || f.EndProcessUsed != 0 || f.StartOtherProcessesUsed != 0 ||
		f.EndOtherProcessesUsed != 0 || f.ProcessUntracked != 0 || len(f.OtherProcesses) != 0) {
		return Measurement{}, errors.New("per-process figures without PerProcess")
	}
	if f.PerProcess && f.PerProcessErr != "" {
		return Measurement{}, errors.New("the figures are PerProcess and have a PerProcessErr")
	}
	if want := (f.EndProcessUsed - f.StartProcessUsed) - (f.EndHeld - f.StartHeld); f.PerProcess && f.ProcessUntracked != want {
		return Measurement{}, fmt.Errorf("the figure ProcessUntracked is %d bytes, not (EndProcessUsed - StartProcessUsed) - (EndHeld - StartHeld) = %d", f.ProcessUntracked, want)
	}
	seen := make(map[string]bool, len(f.Categories))
	for _, c := range f.Categories {
		if c.Category == "" || seen[c.Category] {
			return Measurement{}, fmt.Errorf("category %q: each category once, by its name", c.Category)
		}
		seen[c.Category] = true
		if c.StartTracked < 0 || c.EndTracked < 0 {
			return Measurement{}, fmt.Errorf("category %q: tracked bytes below 0", c.Category)
		}
		if err := peakOf("Tracked of category "+c.Category, c.StartTracked, c.PeakTracked, c.EndTracked, c.PeakTrackedIncrease); err != nil {
			return Measurement{}, err
		}
	}
	for _, p := range f.OtherProcesses {
		if p.Used < 0 {
			return Measurement{}, fmt.Errorf("other process %d uses %d bytes: want 0 or more", p.PID, p.Used)
		}
	}
	m := Measurement{
		Device:       dev,
		StartTracked: f.StartTracked, PeakTracked: f.PeakTracked, EndTracked: f.EndTracked, PeakTrackedIncrease: f.PeakTrackedIncrease,
		StartHeld: f.StartHeld, PeakHeld: f.PeakHeld, EndHeld: f.EndHeld, PeakHeldIncrease: f.PeakHeldIncrease,
		Total: f.Total, StartUsed: f.StartUsed, EndUsed: f.EndUsed, UsedIncrease: f.UsedIncrease,
		StartNotResident: f.StartNotResident, EndNotResident: f.EndNotResident, Untracked: f.Untracked,
		StartGraphReserved: f.StartGraphReserved, EndGraphReserved: f.EndGraphReserved, EndGraphOutliving: f.EndGraphOutliving,
		GraphNeed: f.GraphNeed, Categories: f.Categories,
		PerProcess: f.PerProcess, StartProcessUsed: f.StartProcessUsed, EndProcessUsed: f.EndProcessUsed,
		StartOtherProcessesUsed: f.StartOtherProcessesUsed, EndOtherProcessesUsed: f.EndOtherProcessesUsed,
		ProcessUntracked: f.ProcessUntracked, OtherProcesses: f.OtherProcesses,
	}
	if f.PerProcessErr != "" {
		m.PerProcessErr = savedError(f.PerProcessErr)
	}
	return m, nil
}

// peakOf refuses a figure whose peak is below its start or its end, or
// whose increase is not its peak less its start.
func peakOf(name string, start, peak, end, increase int64) error {
	if peak < start || peak < end {
		return fmt.Errorf("the figure Peak%s is %d bytes, below its start (%d) or its end (%d)", name, peak, start, end)
	}
	if increase != peak-start {
		return fmt.Errorf("the increase of Peak%s is %d bytes, not %d - %d", name, increase, peak, start)
	}
	return nil
}

// savedError is a per-process error read from a file: its text, matching
// ErrPerProcessUnavailable, as every PerProcessErr does.
type savedError string

func (e savedError) Error() string { return string(e) }
func (e savedError) Unwrap() error { return ErrPerProcessUnavailable }
