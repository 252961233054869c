//go:build !cuda

package main

import (
	"errors"

	"github.com/memtrack/memtrack"
)

// decodeGraphs is the decode step captured in CUDA graphs, which a build
// without -tags cuda cannot capture.
type decodeGraphs struct{ captures []memtrack.Capture }

func captureDecode(memtrack.Device, memtrack.Category, int, int, int64) (*decodeGraphs, error) {
	return nil, errors.New("-graphs captures CUDA graphs: build with -tags cuda and run on a CUDA device (-device cuda:0)")
}

func (g *decodeGraphs) print()        {}
func (g *decodeGraphs) launch() error { return nil }
func (g *decodeGraphs) close()        {}
