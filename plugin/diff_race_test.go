//go:build race

package plugin

// raceEnabled shortens the differential test's fixed-seed run under the
// race detector, which slows every statement down.
const raceEnabled = true
