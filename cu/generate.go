package cu

//go:generate go run mirror_gen.go
