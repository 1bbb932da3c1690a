//go:build segpipe_poison

package cpu

// poison: see poison_off.go.
const poison = true
