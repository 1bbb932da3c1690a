//go:build race

package pipeline

// raceEnabled: the race detector drops sync.Pool items at random, so
// allocation counts are not meaningful under it.
const raceEnabled = true
