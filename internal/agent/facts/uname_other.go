//go:build !linux

package facts

func kernel() string { return "" }
