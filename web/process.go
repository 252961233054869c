package web

import "github.com/memtrack/memtrack"

// Process is one other process on the device, as the driver accounts it
// ([memtrack.ProcessMemory]).
type Process struct {
	PID  int    `json:"pid"`
	Name string `json:"name"`
	Used int64  `json:"used"`
}

// processes puts the driver's per-process figures of u into out.
func processes(out *Device, u memtrack.Usage) {
	out.PerProcess = u.PerProcess
	if u.PerProcessErr != nil {
		out.PerProcessError = u.PerProcessErr.Error()
	}
	if !u.PerProcess {
		return
	}
	out.ProcessUsed, out.ProcessUntracked, out.OtherProcessesUsed = u.ProcessUsed, u.ProcessUntracked, u.OtherProcessesUsed
	for _, p := range u.OtherProcesses {
		out.OtherProcesses = append(out.OtherProcesses, Process{PID: p.PID, Name: p.Name, Used: p.Used})
	}
}
