//go:build race

package routing

// raceEnabled: the race detector is on (it makes the 50,000-entry capacity test 18 times slower).
const raceEnabled = true
