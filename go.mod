module github.com/memtrack/memtrack

go 1.24.0

require (
	github.com/google/pprof v0.0.0-20250820193118-f64d9cf942d6
	github.com/stretchr/testify v1.12.1
	go.uber.org/atomic v1.12.0
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
