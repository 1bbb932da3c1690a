//go:build segpipe_poison

package tensor

// poison: see poison_off.go.
const poison = true
