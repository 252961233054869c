// Package spans pairs the begins and ends of the spans of a memtrack
// history ([memtrack.HistoryRecorder.BeginSpan]) and lays the spans out in lanes
// where each lane's spans nest: package trace writes a lane as a thread of
// the trace, and package web draws it as a row of bands.
package spans
